//! Workspace integration tests, one binary (one link) with a module per topic.

mod autocast;
mod checkpoint;
mod checkpointing;
mod crash;
mod deep_copy;
mod forward_checks;
mod fuzz;
mod grad_scaler;
mod hook_order;
mod hooks;
mod hostile_checkpoints;
mod init_stats;
mod layers;
mod layers_rnn;
mod layers_transposed_transformer;
mod layers_volumes;
mod masks;
mod module;
mod ops_repeat_pad_resample;
mod ops_scan_sort_shift;
mod optim_state;
mod parametrize;
mod pytorch_files;
mod reset;
mod ties;
mod training;
