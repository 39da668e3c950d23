//! Workspace integration tests, one binary (one link) with a module per topic.

mod autocast;
mod checkpoint;
mod checkpointing;
mod crash;
mod deep_copy;
mod fuzz;
mod grad_scaler;
mod hooks;
mod hostile_checkpoints;
mod init_stats;
mod layers;
mod layers_b;
mod layers_rnn;
mod layers_volumes;
mod masks;
mod module;
mod ops_a;
mod ops_b;
mod optim_state;
mod pytorch_files;
mod reset;
mod ties;
mod training;
