//! The MPI tests. `cargo test` starts this binary without `mpirun`; it then launches itself
//! as MPI jobs and checks how each one ends:
//!
//! - every check in [`checks`] in a one-process world (no `mpirun`), on 2 ranks
//!   (`mpirun -np 2`) and on 3 ranks oversubscribing 2 cores (`mpirun -np 3 --oversubscribe`);
//!   each rank reports the checks it passed, and every rank must report all of them;
//! - a rank that panics while the others wait in a collective: the job must end, non-zero,
//!   with the panic's message, within a bounded time;
//! - a model with a parameter outside the loss: the job must end with an error naming it;
//! - collective timeouts: a rank that sleeps past a 2 s timeout, a rank killed with SIGKILL
//!   mid-training, and ranks that call different collectives must end their jobs, with the
//!   exit code and the error naming the collective, its sequence number and the ranks.
//!
//! A launched copy finds its scenario in `NN_DISTRIBUTED_SCENARIO`. Arguments that do not
//! start with `-` filter the launches by name, as libtest's do.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCENARIO: &str = "NN_DISTRIBUTED_SCENARIO";
/// A job that has not ended by then is reported as a hang.
const JOB_TIMEOUT: Duration = Duration::from_secs(240);
/// A panicking rank must have ended its job within this (mpirun start-up included).
const ABORT_BOUND: Duration = Duration::from_secs(30);
/// The collective timeout of the timeout scenarios ([`checks::SHORT_TIMEOUT`]), plus
/// mpirun's start-up and the training before the failure: the job must have ended by then.
const TIMEOUT_BOUND: Duration = Duration::from_secs(15);

fn main() {
    match std::env::var(SCENARIO) {
        Ok(scenario) => checks::run(&scenario),
        Err(_) => orchestrate(),
    }
}

/// How a launch must end.
enum Expect {
    /// Exit 0, and every rank reports all checks passed.
    AllPassed,
    /// A non-zero exit (`code` when given) within `within`, with each string of
    /// `output_has` somewhere in the output, and one of `one_of` at least (when not empty).
    Failure {
        within: Duration,
        code: Option<i32>,
        output_has: &'static [&'static str],
        one_of: &'static [&'static str],
    },
}

struct Launch {
    name: &'static str,
    /// `None`: run directly, a one-process world.
    np: Option<usize>,
    scenario: &'static str,
    expect: Expect,
}

const LAUNCHES: &[Launch] = &[
    Launch { name: "all_checks_in_a_one_process_world", np: None, scenario: "all", expect: Expect::AllPassed },
    Launch { name: "all_checks_on_2_ranks", np: Some(2), scenario: "all", expect: Expect::AllPassed },
    Launch { name: "all_checks_on_3_ranks_oversubscribed", np: Some(3), scenario: "all", expect: Expect::AllPassed },
    Launch {
        name: "a_panicking_rank_ends_the_job_with_its_message",
        np: Some(2),
        scenario: "panic",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["rank 1 exploded on purpose", "rank 1 of 2 panicked; aborting the MPI job"],
            one_of: &[],
        },
    },
    Launch {
        name: "a_panic_in_a_one_process_world_ends_it",
        np: None,
        scenario: "panic",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["rank 0 exploded on purpose", "rank 0 of 1 panicked; aborting the MPI job"],
            one_of: &[],
        },
    },
    Launch {
        name: "unused_parameters_end_the_job_naming_them",
        np: Some(2),
        scenario: "unused",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "2 parameter(s) received no gradient",
                "`unused.weight`, `unused.bias`",
                "find_unused_parameters",
            ],
            one_of: &[],
        },
    },
    // Rank 2 sleeps before its 4th training step; ranks 0 and 1 wait in the step's gradient
    // all-reduce, the job's 7th collective (2 construction checks, 1 broadcast, 3 steps), and
    // each names rank 2.
    Launch {
        name: "a_rank_sleeping_past_the_timeout_is_named_by_the_others",
        np: Some(3),
        scenario: "sleep",
        expect: Expect::Failure {
            within: TIMEOUT_BOUND,
            code: Some(nn_distributed::TIMEOUT_EXIT_CODE),
            output_has: &[
                "nn-distributed: all_reduce #7 timed out after 2s on rank 0 of 3: rank 2 did not arrive (it is slow, \
                 stuck or dead, or called fewer collectives); aborting the MPI job (MPI_Abort)",
                "nn-distributed: all_reduce #7 timed out after 2s on rank 1 of 3: rank 2 did not arrive",
            ],
            one_of: &[],
        },
    },
    // Rank 1 SIGKILLs itself in its 5th step. mpirun sees a rank die and ends the job itself;
    // an MPI that did not would leave the others to the timeout.
    Launch {
        name: "a_rank_killed_mid_training_ends_the_job",
        np: Some(2),
        scenario: "sigkill",
        expect: Expect::Failure {
            within: TIMEOUT_BOUND,
            code: None,
            output_has: &["rank 1 kills itself (SIGKILL) in step 5"],
            one_of: &["exited on signal 9", "timed out after 2s on rank 0 of 2"],
        },
    },
    // Rank 1 broadcasts where rank 0 all-reduces, as their 4th collective; each names both
    // calls.
    Launch {
        name: "ranks_calling_different_collectives_are_named",
        np: Some(2),
        scenario: "mismatch",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::MISMATCH_EXIT_CODE),
            output_has: &[
                "nn-distributed: rank 1 called broadcast #4 (3 f32 values from rank 0) while rank 0 called all_reduce \
                 #4 (sum of 3 f32 values): every rank must call the same collectives, in the same order, on tensors \
                 of the same shape and dtype; aborting the MPI job (MPI_Abort)",
                "nn-distributed: rank 0 called all_reduce #4 (sum of 3 f32 values) while rank 1 called broadcast #4 \
                 (3 f32 values from rank 0)",
            ],
            one_of: &[],
        },
    },
    // Every rank replaces a layer of its FSDP-wrapped model, then runs a forward: each rank
    // names the replaced parameters.
    Launch {
        name: "fsdp_a_model_changed_after_wrapping_fails_on_every_rank",
        np: Some(2),
        scenario: "fsdp_changed",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "FullyShardedDataParallel: the wrapped model's parameters changed after wrapping on rank 0: \
                 `2.weight` was replaced by another tensor, `2.bias` was replaced by another tensor",
                "changed after wrapping on rank 1",
            ],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_a_wrapped_model_converted_to_another_dtype_fails_on_every_rank",
        np: Some(2),
        scenario: "fsdp_converted",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "FullyShardedDataParallel: the wrapped model's parameters changed after wrapping on rank 0: \
                 `0.weight` is now f64, sharded as f32",
                "changed after wrapping on rank 1",
            ],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_converting_the_wrapper_to_another_dtype_is_refused",
        np: Some(2),
        scenario: "fsdp_to_dtype",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "FullyShardedDataParallel::to_dtype(f64): unit `0` was sharded as f32; convert the model before \
                 wrapping it",
            ],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_converting_a_parent_of_the_wrapper_is_refused",
        np: Some(2),
        scenario: "fsdp_parent_to_dtype",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "to_dtype(f64): FullyShardedDataParallel inside the module converted cannot follow: its shards were \
                 laid out when the model was wrapped; convert the model before wrapping it (FullyShardedDataParallel \
                 at `inner`)",
            ],
            one_of: &[],
        },
    },
    // Changes to a DDP-wrapped model that would leave gradients unaveraged, and a second
    // backward through one forward: each rank names the parameter.
    Launch {
        name: "ddp_a_parameter_unfrozen_after_wrapping_fails_naming_it",
        np: Some(2),
        scenario: "ddp_unfrozen",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "DistributedDataParallel: on rank 0, parameter `0.weight` requires grad but did not when the model \
                 was wrapped (it was added, replaced or unfrozen since): its gradient would never be averaged",
            ],
            one_of: &[],
        },
    },
    Launch {
        name: "ddp_a_wrapped_model_converted_to_f64_fails_naming_the_dtypes",
        np: Some(2),
        scenario: "ddp_converted",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["parameter `0.weight` is now f64 but was f32 when the model was wrapped"],
            one_of: &[],
        },
    },
    Launch {
        name: "ddp_a_second_backward_through_one_forward_fails",
        np: Some(2),
        scenario: "ddp_second_backward",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["received a gradient on rank", "that no forward of the wrapper prepared"],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_a_parameter_frozen_after_wrapping_fails_on_every_rank",
        np: Some(2),
        scenario: "fsdp_frozen",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["`0.weight` was frozen (requires_grad false); every sharded parameter is trained"],
            one_of: &[],
        },
    },
    // An optimizer step between a forward and its backward: the backward would gather the
    // stepped shards and compute the old activations' gradients against new weights.
    Launch {
        name: "fsdp_a_step_between_forward_and_backward_fails_on_every_rank",
        np: Some(2),
        scenario: "fsdp_step_mid",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["was written (an optimizer step?) between the forward and its backward"],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_a_forward_without_grad_before_backward_names_it_when_units_reshard",
        np: Some(2),
        scenario: "fsdp_no_grad_mid_resharded",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &["through a training forward that a later forward without grad disarmed"],
            one_of: &[],
        },
    },
    Launch {
        name: "fsdp_a_forward_without_grad_before_backward_fails",
        np: Some(2),
        scenario: "fsdp_no_grad_mid",
        expect: Expect::Failure {
            within: ABORT_BOUND,
            code: Some(nn_distributed::PANIC_EXIT_CODE),
            output_has: &[
                "parameter `4.weight` received a gradient on rank",
                "that no training forward of the wrapper",
            ],
            one_of: &[],
        },
    },
];

fn orchestrate() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let selected: Vec<&Launch> =
        LAUNCHES.iter().filter(|l| filters.is_empty() || filters.iter().any(|f| l.name.contains(f.as_str()))).collect();
    if args.iter().any(|a| a == "--list") {
        for l in &selected {
            println!("{}: test", l.name);
        }
        return;
    }
    println!("\nrunning {} tests", selected.len());
    let mut failures = Vec::new();
    for l in &selected {
        print!("test {} ... ", l.name);
        let _ = std::io::stdout().flush();
        let start = Instant::now();
        match launch(l) {
            Ok(()) => println!("ok ({:.1} s)", start.elapsed().as_secs_f64()),
            Err(why) => {
                println!("FAILED");
                failures.push((l.name, why));
            }
        }
    }
    for (name, why) in &failures {
        println!("\n---- {name} ----\n{why}");
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failures.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failures.len(),
        failures.len()
    );
    if !failures.is_empty() {
        std::process::exit(1);
    }
}

/// Runs one launch and checks how it ended.
fn launch(l: &Launch) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this test binary: {e}"))?;
    let mut cmd = match l.np {
        None => Command::new(&exe),
        Some(np) => {
            let mut c = Command::new("mpirun");
            c.args(["-np", &np.to_string(), "--bind-to", "none"]);
            c.args(["--timeout", &JOB_TIMEOUT.as_secs().to_string()]);
            if np > 2 {
                c.arg("--oversubscribe");
            }
            c.arg(&exe);
            c
        }
    };
    // Root may run the tests (CI containers); one compute thread per rank on a small machine.
    cmd.env(SCENARIO, l.scenario)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RAYON_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| match l.np {
        Some(_) => format!("cannot run `mpirun` ({e}): install OpenMPI (`apt-get install openmpi-bin libopenmpi-dev`)"),
        None => format!("cannot run {}: {e}", exe.display()),
    })?;
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = pipe(Box::new(child.stdout.take().expect("piped")));
    let err = pipe(Box::new(child.stderr.take().expect("piped")));
    // mpirun's own --timeout ends a hung job first; this is the backstop.
    let deadline = JOB_TIMEOUT + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = start.elapsed();
    let output = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let report = |what: String| format!("{what} after {:.1} s; output:\n{output}", elapsed.as_secs_f64());
    let Some(status) = status else { return Err(report("the job hung and was killed".into())) };
    match &l.expect {
        Expect::AllPassed => {
            let ranks = l.np.unwrap_or(1);
            let done = output.lines().filter(|line| line.contains(checks::ALL_PASSED)).count();
            if !status.success() || done != ranks {
                return Err(report(format!("exit {status}, {done} of {ranks} ranks passed every check")));
            }
        }
        Expect::Failure { within, code, output_has, one_of } => {
            if status.success() {
                return Err(report("the job succeeded but had to fail".into()));
            }
            if code.is_some() && status.code() != *code {
                return Err(report(format!("exit {status}, but the exit code had to be {}", code.unwrap_or(0))));
            }
            if elapsed > *within {
                return Err(report(format!("the job took longer than {:.0} s to end", within.as_secs_f64())));
            }
            if let Some(missing) = output_has.iter().find(|s| !output.contains(*s)) {
                return Err(report(format!("exit {status}, but the output lacks {missing:?}")));
            }
            if !one_of.is_empty() && !one_of.iter().any(|s| output.contains(s)) {
                return Err(report(format!("exit {status}, but the output has none of {one_of:?}")));
            }
        }
    }
    Ok(())
}

/// What each rank of a launched job runs.
mod checks {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use nn_core::amp::GradScaler;
    use nn_core::functional::cross_entropy;
    use nn_core::optim::{AdamW, AdamWConfig, Optimizer, OptimizerState, Sgd, SgdConfig};
    use nn_core::prelude::*;
    use nn_core::{manual_seed, no_grad};
    use nn_distributed::{
        DdpConfig, DistError, DistributedDataParallel, FsdpConfig, FsdpPolicy, FullyShardedDataParallel, ProcessGroup,
        ReduceOp, ShardedGradScaler, SyncBatchNorm, ZeroRedundancyOptimizer, DEFAULT_TIMEOUT,
    };
    use nn_layers::{
        BatchNorm1d, BatchNorm2d, Conv2d, Embedding, EncoderInput, Flatten, LayerNorm, Linear, ReLU, Sequential,
        TransformerEncoder, TransformerEncoderLayer, TransformerEncoderLayerConfig,
    };

    /// What a rank prints once every check of its scenario has passed.
    pub const ALL_PASSED: &str = "passed every check";

    /// The collective timeout of the failure scenarios.
    pub const SHORT_TIMEOUT: Duration = Duration::from_secs(2);

    type Check = (&'static str, fn(&ProcessGroup));

    const ALL: &[Check] = &[
        ("collectives_reduce_broadcast_and_gather", collectives),
        ("construction_broadcasts_rank_0s_state", construction_broadcasts_rank_0s_state),
        ("models_that_differ_across_ranks_are_refused", models_that_differ_across_ranks_are_refused),
        ("gradients_of_shares_equal_one_process_on_the_whole_batch", gradients_equal_one_process),
        ("twenty_sgd_momentum_steps_stay_identical_across_ranks", twenty_sgd_momentum_steps),
        ("no_sync_accumulates_locally_then_reduces_the_sum", no_sync_accumulates),
        ("buffers_follow_rank_0_at_each_forward", buffers_follow_rank_0),
        ("sync_batch_norm_equals_one_process_batch_norm", sync_batch_norm_equals_one_process),
        ("find_unused_parameters_reduces_what_was_used", find_unused_parameters),
        ("a_forward_without_grad_before_backward_keeps_the_averaging", a_no_grad_forward_before_backward),
        ("find_unused_parameters_counts_what_no_sync_passes_used", find_unused_with_no_sync),
        ("lazy_layers_are_refused_before_they_are_initialised", lazy_layers_are_refused),
        ("a_dropped_zero_optimizer_lifts_its_gradient_mask", dropped_zero_lifts_its_mask),
        ("sync_batch_norm_converts_the_layers_inside_fsdp", sync_batch_norm_inside_fsdp),
        (
            "fsdp_evaluates_without_grad_after_a_forward_whose_backward_never_ran",
            fsdp_no_grad_after_an_abandoned_forward,
        ),
        ("the_wrapper_has_the_models_keys_and_hooks", wrapper_keys_and_hooks),
        ("timeouts_are_positive_and_sequence_numbers_shared", timeouts_and_sequence_numbers),
        ("a_slow_rank_within_the_timeout_is_waited_for", a_slow_rank_within_the_timeout),
        ("zero_partitions_greedily_and_refuses_different_parameters", zero_partition_and_construction),
        ("zero_adamw_matches_one_process_and_resumes_from_its_consolidated_state", zero_adamw_parity_and_resume),
        ("zero_transformer_adamw_matches_one_process_for_20_steps", zero_transformer_parity),
        ("fsdp_wraps_by_policy_and_refuses_bad_construction", fsdp_policy_and_construction),
        ("fsdp_transformer_adamw_matches_one_process_for_20_steps", fsdp_transformer_parity),
        ("fsdp_transformer_adamw_in_f32_matches_one_process_but_for_the_key_bias", fsdp_transformer_parity_f32),
        ("fsdp_nested_units_by_size_match_one_process", fsdp_nested_units),
        ("fsdp_holds_full_parameters_only_inside_a_units_forward", fsdp_frees_outside_forward),
        ("fsdp_full_state_dict_round_trips_and_refuses_another_model", fsdp_full_state_dict),
        ("sharded_grad_scaler_skips_on_every_rank_when_one_shard_overflows", fsdp_sharded_grad_scaler),
        ("fsdp_sharded_checkpoints_resume_and_refuse_other_worlds_and_ranks", fsdp_sharded_checkpoint),
    ];

    pub fn run(scenario: &str) {
        let group = ProcessGroup::init().expect("MPI starts");
        let list: &[Check] = match scenario {
            "all" => ALL,
            "panic" => &[("a_rank_panics", a_rank_panics)],
            "unused" => &[("an_unused_parameter", an_unused_parameter)],
            "sleep" => &[("a_rank_sleeps_past_the_timeout", a_rank_sleeps_past_the_timeout)],
            "sigkill" => &[("a_rank_is_killed_mid_training", a_rank_is_killed_mid_training)],
            "mismatch" => &[("ranks_call_different_collectives", ranks_call_different_collectives)],
            "fsdp_changed" => &[("a_wrapped_model_changes_its_parameters", fsdp_model_changed)],
            "fsdp_converted" => &[("a_wrapped_models_parameters_change_dtype", fsdp_model_converted)],
            "fsdp_to_dtype" => &[("a_wrapper_is_converted", fsdp_wrapper_converted)],
            "fsdp_parent_to_dtype" => &[("a_parent_of_a_wrapper_is_converted", fsdp_parent_converted)],
            "ddp_unfrozen" => &[("a_parameter_is_unfrozen_after_wrapping", ddp_unfrozen)],
            "ddp_converted" => &[("a_wrapped_model_is_converted", ddp_converted)],
            "ddp_second_backward" => &[("a_second_backward_through_one_forward", ddp_second_backward)],
            "fsdp_frozen" => &[("a_sharded_parameter_is_frozen", fsdp_frozen)],
            "fsdp_step_mid" => &[("a_step_between_forward_and_backward", fsdp_step_mid)],
            "fsdp_no_grad_mid" => &[("a_forward_without_grad_before_backward", fsdp_no_grad_mid)],
            "fsdp_no_grad_mid_resharded" => {
                &[("a_forward_without_grad_before_backward_resharded", fsdp_no_grad_mid_resharded)]
            }
            other => panic!("unknown scenario {other:?}"),
        };
        for (name, check) in list {
            check(&group);
            if group.rank() == 0 {
                println!("  {name}: ok on {} rank(s)", group.world_size());
            }
        }
        group.barrier();
        println!("rank {} of {}: {ALL_PASSED} ({})", group.rank(), group.world_size(), list.len());
    }

    // ------------------------------------------------------------------------------------
    // Helpers
    // ------------------------------------------------------------------------------------

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "lengths differ");
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    #[track_caller]
    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        let d = max_abs_diff(got, want);
        assert!(d <= tol, "{what}: max |difference| {d:e} exceeds {tol:e}");
    }

    fn params_of(m: &dyn Module) -> Vec<f32> {
        m.parameters().iter().flat_map(|p| p.to_vec()).collect()
    }

    fn grads_of(m: &dyn Module) -> Vec<f32> {
        m.parameters().iter().flat_map(|p| p.grad().expect("a gradient").to_vec()).collect()
    }

    /// True when every rank holds exactly rank 0's `values`, bit for bit.
    fn identical_across_ranks(group: &ProcessGroup, values: &[f32]) -> bool {
        let t = Tensor::from_vec(values.to_vec(), &[values.len()]);
        let all = group.all_gather(&t);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let first = bits(&all[0].to_vec());
        all.iter().all(|t| bits(&t.to_vec()) == first)
    }

    /// This rank's rows of a batch of `n` split in equal contiguous shares.
    fn share(group: &ProcessGroup, t: &Tensor) -> Tensor {
        let n = t.shape()[0];
        assert_eq!(n % group.world_size(), 0, "the batch must split evenly");
        let k = n / group.world_size();
        t.narrow(0, group.rank() * k, k).contiguous()
    }

    fn labels(n: usize, classes: i64, salt: i64) -> Tensor {
        Tensor::from_vec_i64((0..n as i64).map(|i| (i * 7 + salt) % classes).collect(), &[n])
    }

    fn mlp() -> Sequential {
        Sequential::new()
            .add(Linear::new(6, 32))
            .add(ReLU::new())
            .add(Linear::new(32, 16))
            .add(ReLU::new())
            .add(Linear::new(16, 3))
    }

    fn cnn() -> Sequential {
        Sequential::new()
            .add(Conv2d::new(1, 4, 3))
            .add(ReLU::new())
            .add(Conv2d::new(4, 6, 3))
            .add(ReLU::new())
            .add(Flatten::new())
            .add(Linear::new(6 * 4 * 4, 5))
    }

    /// Tiny buckets: several of them, so the overlap and ordering paths run.
    fn small_buckets() -> DdpConfig {
        DdpConfig { first_bucket_cap_mb: 0.000_1, bucket_cap_mb: 0.000_5, ..Default::default() }
    }

    // ------------------------------------------------------------------------------------
    // Checks
    // ------------------------------------------------------------------------------------

    fn collectives(group: &ProcessGroup) {
        let (r, w) = (group.rank() as f32, group.world_size() as f32);
        let s = w * (w - 1.0) / 2.0;
        let t = Tensor::from_vec(vec![r, r + 1.0, -r], &[3]);
        assert_eq!(group.all_reduce(&t, ReduceOp::Sum).to_vec(), [s, s + w, -s]);
        assert_eq!(group.all_reduce(&t, ReduceOp::Max).to_vec(), [w - 1.0, w, 0.0]);
        assert_eq!(group.all_reduce(&t, ReduceOp::Min).to_vec(), [0.0, 1.0, 1.0 - w]);
        let factorial: f32 = (1..=group.world_size()).map(|k| k as f32).product();
        assert_eq!(group.all_reduce(&t, ReduceOp::Product).to_vec()[1], factorial);
        assert_eq!(group.all_reduce(&t, ReduceOp::Avg).to_vec(), [s / w, (s + w) / w, -s / w]);
        // Other dtypes keep theirs; integers are exact.
        let big = Tensor::from_vec_i64(vec![1_000_000_007 * (group.rank() as i64 + 1)], &[1]);
        let n = group.world_size() as i64;
        assert_eq!(group.all_reduce(&big, ReduceOp::Sum).to_vec_i64(), [1_000_000_007 * n * (n + 1) / 2]);
        let h = t.to_dtype(DType::F16);
        let hs = group.all_reduce(&h, ReduceOp::Sum);
        assert_eq!((hs.dtype(), hs.to_vec()), (DType::F16, vec![s, s + w, -s]));
        let d = Tensor::from_vec_f64(vec![0.25 * (r as f64)], &[1, 1]);
        assert_eq!(group.all_reduce(&d, ReduceOp::Sum).to_vec_f64(), [0.25 * s as f64]);
        // Two reductions in flight at once complete in order.
        let a = group.all_reduce_async(&t, ReduceOp::Sum);
        let b = group.all_reduce_async(&(&t * 2.0), ReduceOp::Sum);
        assert_eq!(b.wait().to_vec(), [2.0 * s, 2.0 * (s + w), -2.0 * s]);
        assert_eq!(a.wait().to_vec(), [s, s + w, -s]);
        for root in 0..group.world_size() {
            let mine = Tensor::from_vec(vec![10.0 * r, 1.0], &[1, 2]);
            let got = group.broadcast(&mine, root);
            assert_eq!((got.shape(), got.to_vec()), (&[1, 2][..], vec![10.0 * root as f32, 1.0]));
        }
        let gathered = group.all_gather(&Tensor::from_vec(vec![r, r * r], &[2]));
        assert_eq!(gathered.len(), group.world_size());
        for (k, g) in gathered.iter().enumerate() {
            assert_eq!(g.to_vec(), [k as f32, (k * k) as f32]);
        }
        group.barrier();
    }

    fn construction_broadcasts_rank_0s_state(group: &ProcessGroup) {
        // Every rank initialises differently; after wrapping, all hold rank 0's values.
        manual_seed(100 + group.rank() as u64);
        let model = Sequential::new().add(Linear::new(5, 7)).add(BatchNorm1d::new(7)).add(Linear::new(7, 2));
        model.get::<BatchNorm1d>(1).unwrap().running_mean.as_ref().unwrap().fill_(group.rank() as f64);
        let before = params_of(&model);
        let ddp = DistributedDataParallel::new(model, group).unwrap();
        let after = params_of(&ddp);
        assert!(identical_across_ranks(group, &after), "parameters differ across ranks after construction");
        if group.rank() == 0 {
            assert_eq!(before, after, "rank 0 keeps its own values");
        } else {
            assert_ne!(before, after, "rank {} took rank 0's values", group.rank());
        }
        let bufs: Vec<f32> = ddp.buffers().iter().flat_map(|b| b.to_vec()).collect();
        assert!(identical_across_ranks(group, &bufs), "buffers differ across ranks after construction");
        assert!(bufs[..7].iter().all(|&v| v == 0.0), "rank 0's running mean everywhere");
        // Buckets in reverse registration order; a 1 MiB first bucket holds this whole model.
        assert_eq!(ddp.bucket_parameter_names(), [["2.bias", "2.weight", "1.bias", "1.weight", "0.bias", "0.weight"]]);
    }

    fn models_that_differ_across_ranks_are_refused(group: &ProcessGroup) {
        let last = group.world_size() - 1;
        let out = if group.rank() == last && last > 0 { 5 } else { 4 };
        let model = Sequential::new().add(Linear::new(3, 3)).add(Linear::new(3, out));
        match DistributedDataParallel::new(model, group) {
            Ok(_) => assert_eq!(last, 0, "a world of one cannot disagree with itself"),
            Err(DistError::ModelMismatch(msg)) => {
                assert!(last > 0);
                let want = format!("`1.weight` is [4, 3] f32 on rank 0 but [5, 3] f32 on rank {last}");
                assert_eq!(msg, want);
            }
            Err(e) => panic!("unexpected error {e}"),
        }
        let bad =
            DistributedDataParallel::with_config(mlp(), group, DdpConfig { bucket_cap_mb: 0.0, ..Default::default() });
        assert!(matches!(bad, Err(DistError::InvalidConfig(m)) if m == "bucket_cap_mb must be positive, got 0"));
    }

    fn gradients_equal_one_process(group: &ProcessGroup) {
        for (config, buckets) in [(DdpConfig::default(), 1), (small_buckets(), 3)] {
            manual_seed(7);
            let x = Tensor::randn(&[24, 6]);
            let y = labels(24, 3, 1);
            manual_seed(11);
            let reference = mlp();
            cross_entropy(&reference.forward(&x), &y).backward();
            manual_seed(11);
            let ddp = DistributedDataParallel::with_config(mlp(), group, config).unwrap();
            assert_eq!(ddp.bucket_parameter_names().len(), buckets);
            cross_entropy(&ddp.forward(&share(group, &x)), &share(group, &y)).backward();
            assert_close(&grads_of(&ddp), &grads_of(&reference), 1e-6, "gradients vs one process");
            // Every bucket but the last started while backward was still running.
            let stats = ddp.reduction_stats();
            assert_eq!((stats.buckets, stats.overlapped), (buckets, buckets - 1));
            assert!(identical_across_ranks(group, &grads_of(&ddp)), "gradients differ across ranks");
        }
    }

    fn twenty_sgd_momentum_steps(group: &ProcessGroup) {
        let sgd = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-4, ..Default::default() };
        manual_seed(3);
        let reference = cnn();
        manual_seed(3);
        let ddp = DistributedDataParallel::with_config(cnn(), group, small_buckets()).unwrap();
        let mut ref_opt = Sgd::new(reference.parameters(), sgd);
        let mut opt = Sgd::new(ddp.parameters(), sgd);
        for step in 0..20 {
            manual_seed(1000 + step);
            let x = Tensor::randn(&[12, 1, 8, 8]);
            let y = labels(12, 5, step as i64);
            ref_opt.zero_grad();
            cross_entropy(&reference.forward(&x), &y).backward();
            ref_opt.step();
            opt.zero_grad();
            cross_entropy(&ddp.forward(&share(group, &x)), &share(group, &y)).backward();
            opt.step();
        }
        let p = params_of(&ddp);
        assert!(identical_across_ranks(group, &p), "parameters differ across ranks after 20 steps");
        assert_close(&p, &params_of(&reference), 1e-5, "parameters after 20 steps vs one process");
        assert_ne!(p, params_of(&cnn()), "training moved the parameters");
    }

    fn no_sync_accumulates(group: &ProcessGroup) {
        manual_seed(21);
        let micro: Vec<(Tensor, Tensor)> = (0..3).map(|k| (Tensor::randn(&[6, 6]), labels(6, 3, k))).collect();
        manual_seed(5);
        let reference = mlp();
        for (x, y) in &micro {
            cross_entropy(&reference.forward(x), y).backward();
        }
        manual_seed(5);
        let local = mlp();
        manual_seed(5);
        let ddp = DistributedDataParallel::with_config(mlp(), group, small_buckets()).unwrap();
        let (last, rest) = micro.split_last().unwrap();
        ddp.no_sync(|| {
            for (x, y) in rest {
                cross_entropy(&ddp.forward(&share(group, x)), &share(group, y)).backward();
                cross_entropy(&local.forward(&share(group, x)), &share(group, y)).backward();
            }
        });
        // Inside no_sync nothing was reduced: each rank holds its own shares' gradients.
        assert_eq!(grads_of(&ddp), grads_of(&local));
        cross_entropy(&ddp.forward(&share(group, &last.0)), &share(group, &last.1)).backward();
        assert_close(&grads_of(&ddp), &grads_of(&reference), 1e-6, "accumulated gradients vs one process");
    }

    fn buffers_follow_rank_0(group: &ProcessGroup) {
        for broadcast_buffers in [true, false] {
            manual_seed(8);
            let model = Sequential::new().add(Linear::new(4, 3)).add(BatchNorm1d::new(3));
            let config = DdpConfig { broadcast_buffers, ..Default::default() };
            let ddp = DistributedDataParallel::with_config(model, group, config).unwrap();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = seen.clone();
            let bn = ddp.module().get::<BatchNorm1d>(1).unwrap();
            let rm = bn.running_mean.clone().unwrap();
            bn.register_forward_pre_hook(move |_| {
                log.lock().unwrap().push(rm.to_vec());
                None
            })
            .unwrap();
            // Each rank's batch has its own mean, so its running mean moves its own way.
            let x = |step: usize| Tensor::full(&[4, 4], (group.rank() + 1) as f64 * (step + 1) as f64);
            ddp.forward(&x(0)).sum().backward();
            let after_first = bn.running_mean.as_ref().unwrap().to_vec();
            ddp.forward(&x(1)).sum().backward();
            let at_second = seen.lock().unwrap()[1].clone();
            let rank0_after_first = group.broadcast(&Tensor::from_vec(after_first.clone(), &[3]), 0).to_vec();
            if broadcast_buffers {
                assert_eq!(at_second, rank0_after_first, "the second forward starts from rank 0's statistics");
            } else {
                assert_eq!(at_second, after_first, "without broadcast_buffers each rank keeps its own");
            }
            // Forward without grad (evaluation) does not communicate, so ranks may differ.
            no_grad(|| ddp.forward(&x(2)));
        }
    }

    fn sync_batch_norm_equals_one_process(group: &ProcessGroup) {
        let build = || {
            Sequential::new()
                .add(Conv2d::new(2, 3, 3))
                .add(BatchNorm2d::new(3))
                .add(ReLU::new())
                .add(Flatten::new())
                .add(Linear::new(3 * 3 * 3, 4))
        };
        manual_seed(9);
        let x = Tensor::randn(&[12, 2, 5, 5]) * 2.0 + 0.5;
        let y = labels(12, 4, 3);
        manual_seed(4);
        let reference = build();
        cross_entropy(&reference.forward(&x), &y).backward();
        manual_seed(4);
        let mut model = build();
        assert_eq!(SyncBatchNorm::convert_sync_batchnorm(&mut model, group), 1);
        let ddp = DistributedDataParallel::new(model, group).unwrap();
        cross_entropy(&ddp.forward(&share(group, &x)), &share(group, &y)).backward();
        assert_close(&grads_of(&ddp), &grads_of(&reference), 1e-5, "SyncBatchNorm gradients vs one process");
        let stats = |m: &dyn Module| -> Vec<f32> {
            m.named_buffers().iter().filter(|(n, _)| n.contains("running")).flat_map(|(_, t)| t.to_vec()).collect()
        };
        assert_close(&stats(&ddp), &stats(&reference), 1e-6, "SyncBatchNorm running statistics");
        assert!(identical_across_ranks(group, &stats(&ddp)));

        // One sample per process, and none on rank 0 with three or more: the batch that
        // counts is every process's together, as PyTorch's SyncBatchNorm (a process must
        // not refuse its own one-sample batch, and an empty one must still join the
        // exchange the others wait in).
        let world = group.world_size();
        if world >= 2 {
            manual_seed(5);
            let all = Tensor::randn(&[world, 3]);
            let first = usize::from(world >= 3);
            let mut synced = Sequential::new().add(BatchNorm1d::new(3));
            assert_eq!(SyncBatchNorm::convert_sync_batchnorm(&mut synced, group), 1);
            let r = group.rank();
            let mine = if r < first { all.narrow(0, 0, 0) } else { all.narrow(0, r, 1) };
            let y = synced.forward(&mine);
            let reference = Sequential::new().add(BatchNorm1d::new(3));
            let want = reference.forward(&all.narrow(0, first, world - first));
            if r >= first {
                assert_close(&y.to_vec(), &want.narrow(0, r - first, 1).to_vec(), 1e-5, "one sample per process");
            } else {
                assert_eq!(y.shape(), [0, 3]);
            }
            assert_close(&stats(&synced), &stats(&reference), 1e-6, "running statistics of one sample per process");
        }
    }

    #[derive(Module)]
    struct TwoHeads {
        #[module]
        used: Linear,
        #[module]
        unused: Linear,
        #[base]
        base: ModuleBase,
        /// Ranks whose forward uses `unused` too.
        users: Vec<usize>,
        rank: usize,
    }

    impl Compute for TwoHeads {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            let y = self.used.forward(x);
            if self.users.contains(&self.rank) {
                y + self.unused.forward(x)
            } else {
                y
            }
        }
    }

    fn two_heads(group: &ProcessGroup, users: Vec<usize>) -> TwoHeads {
        manual_seed(6);
        TwoHeads {
            used: Linear::new(4, 2),
            unused: Linear::new(4, 2),
            base: ModuleBase::new(),
            users,
            rank: group.rank(),
        }
    }

    fn find_unused_parameters(group: &ProcessGroup) {
        let config = DdpConfig { find_unused_parameters: true, ..small_buckets() };
        manual_seed(12);
        let x = Tensor::randn(&[group.world_size() * 2, 4]);
        // Only rank 0 uses the second head: the others contribute zeros to its average.
        let ddp = DistributedDataParallel::with_config(two_heads(group, vec![0]), group, config).unwrap();
        ddp.forward(&share(group, &x)).square().sum().backward();
        let rank0 = two_heads(group, vec![0]);
        let mut alone = rank0;
        alone.rank = 0;
        alone.forward(&x.narrow(0, 0, 2)).square().sum().backward();
        let w = group.world_size() as f32;
        let want: Vec<f32> = alone.unused.weight.grad().unwrap().to_vec().iter().map(|g| g / w).collect();
        assert_close(&ddp.module().unused.weight.grad().unwrap().to_vec(), &want, 1e-6, "partly used head");
        // Nobody uses it: its gradient stays unset, and the rest is reduced as usual.
        let ddp = DistributedDataParallel::with_config(two_heads(group, vec![]), group, config).unwrap();
        ddp.forward(&share(group, &x)).square().sum().backward();
        assert!(
            ddp.module().unused.weight.grad().is_none() && ddp.module().unused.bias.as_ref().unwrap().grad().is_none()
        );
        assert!(identical_across_ranks(group, &ddp.module().used.weight.grad().unwrap().to_vec()));
    }

    fn wrapper_keys_and_hooks(group: &ProcessGroup) {
        manual_seed(2);
        let mut ddp = DistributedDataParallel::new(mlp(), group).unwrap();
        let keys: Vec<String> = ddp.state_dict().keys().map(String::from).collect();
        assert_eq!(keys, mlp().state_dict().keys().map(String::from).collect::<Vec<_>>());
        let mut bare = mlp();
        bare.load_state_dict(&ddp.state_dict(), true).unwrap();
        assert_eq!(params_of(&bare), params_of(&ddp));
        // The model's state-dict hooks, registered before wrapping, run as the wrapper's.
        let inner = mlp();
        let prefixes = Arc::new(Mutex::new(Vec::new()));
        let p = prefixes.clone();
        inner
            .register_state_dict_post_hook(move |_, prefix| {
                p.lock().unwrap().push(prefix.to_string());
                Ok(())
            })
            .unwrap();
        let wrapped = DistributedDataParallel::new(inner, group).unwrap();
        let _ = wrapped.state_dict();
        assert_eq!(*prefixes.lock().unwrap(), [""]);
        assert!(ddp.to_string().starts_with("DistributedDataParallel(\n  (0): Linear(in_features=6"));
        let calls = Arc::new(Mutex::new(0));
        let c = calls.clone();
        let h = ddp
            .register_forward_hook(move |_, _| {
                *c.lock().unwrap() += 1;
                None
            })
            .unwrap();
        ddp.eval();
        assert!(!ddp.is_training() && !ddp.module().get::<Linear>(0).unwrap().is_training());
        ddp.forward(&Tensor::ones(&[1, 6]));
        assert_eq!(*calls.lock().unwrap(), 1);
        h.remove();
        // Unwrapping removes the gradient hooks: backward on the bare model is local only.
        let model = ddp.into_inner();
        model.forward(&Tensor::ones(&[2, 6])).sum().backward();
        assert!(model.parameters().iter().all(|p| p.grad().is_some()));
    }

    fn a_rank_panics(group: &ProcessGroup) {
        let last = group.world_size() - 1;
        if group.rank() == last {
            panic!("rank {last} exploded on purpose");
        }
        // The others wait for it in a collective that would never complete.
        group.all_reduce(&Tensor::ones(&[4]), ReduceOp::Sum);
        unreachable!("the job should have been aborted");
    }

    fn an_unused_parameter(group: &ProcessGroup) {
        let ddp = DistributedDataParallel::new(two_heads(group, vec![]), group).unwrap();
        ddp.forward(&Tensor::ones(&[2, 4])).sum().backward();
        unreachable!("backward should have panicked");
    }

    fn timeouts_and_sequence_numbers(group: &ProcessGroup) {
        assert_eq!(group.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(1800));
        let zero = ProcessGroup::init_with(Duration::ZERO).unwrap_err();
        assert!(matches!(zero, DistError::ZeroTimeout { at: "ProcessGroup::init_with" }));
        assert!(zero.to_string().starts_with("ProcessGroup::init_with: the timeout is 0 s, which would fail every"));
        assert!(matches!(group.with_timeout(Duration::ZERO), Err(DistError::ZeroTimeout { .. })));
        let config = DdpConfig { timeout: Some(Duration::ZERO), ..Default::default() };
        match DistributedDataParallel::with_config(mlp(), group, config) {
            Err(DistError::ZeroTimeout { at }) => assert!(at.contains("DdpConfig::timeout"), "{at}"),
            other => panic!("a zero DdpConfig::timeout must be refused, got {:?}", other.map(|_| ())),
        }
        // A handle with its own timeout; the sequence numbers are the group's.
        let quick = group.with_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!((quick.timeout(), group.timeout()), (Duration::from_secs(20), DEFAULT_TIMEOUT));
        let n = group.sequence_number();
        let t = Tensor::ones(&[2]);
        quick.all_reduce(&t, ReduceOp::Sum);
        group.broadcast(&t, 0);
        quick.barrier();
        assert_eq!((quick.sequence_number(), group.sequence_number()), (n + 3, n + 3));
        let config = DdpConfig { timeout: Some(Duration::from_secs(20)), ..Default::default() };
        let ddp = DistributedDataParallel::with_config(mlp(), group, config).unwrap();
        assert_eq!(ddp.group().timeout(), Duration::from_secs(20));
        // The ranks issued as many collectives as each other.
        let seq = Tensor::from_vec_i64(vec![group.sequence_number() as i64], &[1]);
        assert_eq!(group.all_reduce(&seq, ReduceOp::Max).to_vec_i64(), seq.to_vec_i64());
    }

    fn a_slow_rank_within_the_timeout(group: &ProcessGroup) {
        let quick = group.with_timeout(SHORT_TIMEOUT).unwrap();
        if group.rank() == group.world_size() - 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let w = group.world_size() as f32;
        assert_eq!(quick.all_reduce(&Tensor::ones(&[3]), ReduceOp::Sum).to_vec(), [w; 3]);
    }

    /// A few training steps of an MLP under DDP with [`SHORT_TIMEOUT`]; `before(step)` runs
    /// at the start of each.
    fn train(group: &ProcessGroup, steps: usize, before: impl Fn(usize)) {
        manual_seed(5);
        let config = DdpConfig { timeout: Some(SHORT_TIMEOUT), ..Default::default() };
        let ddp = DistributedDataParallel::with_config(mlp(), group, config).unwrap();
        let mut opt = Sgd::new(ddp.parameters(), SgdConfig { lr: 0.1, ..Default::default() });
        for step in 1..=steps {
            before(step);
            manual_seed(step as u64);
            let x = Tensor::randn(&[4, 6]);
            opt.zero_grad();
            cross_entropy(&ddp.forward(&x), &labels(4, 3, step as i64)).backward();
            opt.step();
        }
    }

    fn a_rank_sleeps_past_the_timeout(group: &ProcessGroup) {
        let last = group.world_size() - 1;
        train(group, 4, |step| {
            if step == 4 {
                // 2 all_gathers and a broadcast at construction, one all_reduce per step.
                assert_eq!(group.sequence_number(), 6);
                if group.rank() == last {
                    std::thread::sleep(Duration::from_secs(30));
                }
            }
        });
        unreachable!("the job should have been aborted");
    }

    fn a_rank_is_killed_mid_training(group: &ProcessGroup) {
        train(group, 20, |step| {
            if step == 5 && group.rank() == 1 {
                eprintln!("rank 1 kills itself (SIGKILL) in step 5");
                let pid = std::process::id().to_string();
                let _ = std::process::Command::new("kill").args(["-s", "KILL", &pid]).status();
                std::thread::sleep(Duration::from_secs(30));
            }
        });
        unreachable!("the job should have been aborted");
    }

    fn ranks_call_different_collectives(group: &ProcessGroup) {
        let t = Tensor::ones(&[3]);
        for _ in 0..3 {
            group.all_reduce(&t, ReduceOp::Sum);
        }
        if group.rank() == 1 {
            group.broadcast(&t, 0);
        } else {
            group.all_reduce(&t, ReduceOp::Sum);
        }
        unreachable!("the job should have been aborted");
    }

    fn zero_partition_and_construction(group: &ProcessGroup) {
        let model = mlp();
        let zero = ZeroRedundancyOptimizer::new(model.named_parameters(), group, |g| Sgd::new(g, SgdConfig::default()))
            .unwrap();
        // Largest first, each to the least loaded rank (sizes 192, 32, 512, 16, 48, 3).
        let want: Vec<Vec<&str>> = match group.world_size() {
            1 => vec![vec!["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]],
            2 => vec![vec!["2.weight"], vec!["0.weight", "0.bias", "2.bias", "4.weight", "4.bias"]],
            3 => vec![vec!["2.weight"], vec!["0.weight"], vec!["0.bias", "2.bias", "4.weight", "4.bias"]],
            w => panic!("no expected partition for {w} ranks"),
        };
        assert_eq!(zero.partition(), want);
        assert_eq!(zero.named_parameters().len(), 6);
        let mine: Vec<String> = zero.inner().named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(mine, want[group.rank()]);
        // The last rank names a parameter differently: every rank is told, with both names.
        let last = group.world_size() - 1;
        let mut named = model.named_parameters();
        if group.rank() == last && last > 0 {
            named[1].0 = "fc.bias".into();
        }
        match ZeroRedundancyOptimizer::new(named, group, |g| Sgd::new(g, SgdConfig::default())) {
            Ok(_) => assert_eq!(last, 0),
            Err(DistError::ShardMismatch(msg)) => {
                assert_eq!(msg, format!("entry 1 of the parameters is `0.bias` on rank 0 but `fc.bias` on rank {last}"))
            }
            Err(e) => panic!("unexpected error {e}"),
        }
        // One parameter under a second name: with two ranks the two copies of the largest
        // land on different ranks, where neither rank's optimizer sees both (it would be
        // stepped twice). Refused whole, on every rank.
        let mut tied = model.named_parameters();
        tied.push(("tied.weight".into(), tied[2].1.clone()));
        match ZeroRedundancyOptimizer::new(tied, group, |g| Sgd::new(g, SgdConfig::default())) {
            Ok(_) => panic!("a parameter given twice was accepted"),
            Err(e @ DistError::ParamGroups(_)) => {
                let msg = e.to_string();
                assert!(msg.starts_with("ZeroRedundancyOptimizer::new: "), "{msg}");
                assert!(msg.contains("tied.weight") && msg.contains("2.weight"), "{msg}");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    fn zero_adamw_parity_and_resume(group: &ProcessGroup) {
        let config = AdamWConfig { lr: 1e-2, weight_decay: 0.05, ..Default::default() };
        manual_seed(13);
        let reference = mlp();
        manual_seed(13);
        let ddp = DistributedDataParallel::new(mlp(), group).unwrap();
        let mut ref_opt = AdamW::new(reference.named_parameters(), config);
        let mut zero = ZeroRedundancyOptimizer::new(ddp.named_parameters(), group, |g| AdamW::new(g, config)).unwrap();
        let batch = |step: usize| {
            manual_seed(500 + step as u64);
            (Tensor::randn(&[12, 6]), labels(12, 3, step as i64))
        };
        let step_ref = |opt: &mut AdamW, step: usize| {
            let (x, y) = batch(step);
            opt.zero_grad();
            cross_entropy(&reference.forward(&x), &y).backward();
            opt.step();
        };
        let step_ddp = |model: &DistributedDataParallel<Sequential>, opt: &mut dyn Optimizer, step: usize| {
            let (x, y) = batch(step);
            opt.zero_grad();
            cross_entropy(&model.forward(&share(group, &x)), &share(group, &y)).backward();
            opt.step();
        };
        for step in 0..10 {
            step_ref(&mut ref_opt, step);
            step_ddp(&ddp, &mut zero, step);
        }
        // The whole state on rank 0, keyed and ordered as one AdamW over the whole model.
        zero.consolidate_state_dict(0);
        let want = ref_opt.state_dict();
        let mut state = OptimizerState::default();
        if group.rank() == 0 {
            state = zero.state_dict();
            assert_eq!(state.tensors.keys().collect::<Vec<_>>(), want.tensors.keys().collect::<Vec<_>>());
            assert_eq!(state.lrs, want.lrs);
            for (key, t) in want.tensors.iter() {
                assert_close(&state.tensors.get(key).unwrap().to_vec(), &t.to_vec(), 1e-5, key);
            }
            // A plain AdamW over the whole model loads it.
            let mut plain = AdamW::new(mlp().named_parameters(), config);
            plain.load_state_dict(&state).unwrap();
        } else {
            assert!(zero.consolidated_state().is_none());
        }
        // Resume: rank 0 writes the state to a file, every rank reads it back into a fresh
        // optimizer over a copy of the model, and both go on for 10 more steps.
        let pid = group.broadcast(&Tensor::from_vec_i64(vec![std::process::id() as i64], &[1]), 0).to_vec_i64()[0];
        let path = std::env::temp_dir().join(format!("nn-distributed-zero-{pid}.safetensors"));
        if group.rank() == 0 {
            state.tensors.save(&path).unwrap();
        }
        group.barrier();
        let loaded = OptimizerState {
            tensors: nn_core::StateDict::load(&path).unwrap(),
            lrs: vec![config.lr],
            ..Default::default()
        };
        group.barrier();
        if group.rank() == 0 {
            std::fs::remove_file(&path).unwrap();
        }
        let copy = DistributedDataParallel::new(mlp(), group).unwrap();
        no_grad(|| {
            copy.parameters().iter().zip(ddp.parameters()).for_each(|(c, p)| {
                c.copy_(&p);
            })
        });
        let mut resumed =
            ZeroRedundancyOptimizer::new(copy.named_parameters(), group, |g| AdamW::new(g, config)).unwrap();
        resumed.load_state_dict(&loaded).unwrap();
        // A state that only rank 1's part refuses (a moment of the wrong shape): every rank
        // gets an error, and every rank keeps the state it had (the resumed run below still
        // equals the uninterrupted one bit for bit).
        if group.world_size() > 1 {
            let victim = &resumed.partition()[1][0];
            let mut bad = loaded.clone();
            bad.tensors.insert(format!("{victim}.exp_avg"), Tensor::zeros(&[1]));
            let err = resumed.load_state_dict(&bad).unwrap_err().to_string();
            if group.rank() == 1 {
                assert!(err.contains(victim.as_str()) && !err.contains("refused their part"), "{err}");
            } else {
                assert!(err.contains("rank(s) [1] refused their part of this state"), "{err}");
            }
        }
        for step in 10..20 {
            step_ref(&mut ref_opt, step);
            step_ddp(&ddp, &mut zero, step);
            step_ddp(&copy, &mut resumed, step);
        }
        let p = params_of(&ddp);
        assert!(identical_across_ranks(group, &p), "parameters differ across ranks after 20 ZeRO AdamW steps");
        assert_close(&p, &params_of(&reference), 1e-5, "ZeRO AdamW after 20 steps vs one process");
        assert_eq!(params_of(&copy), p, "the resumed run equals the uninterrupted one, bit for bit");
        assert_ne!(p, params_of(&mlp()), "training moved the parameters");
    }

    // ------------------------------------------------------------------------------------
    // FullyShardedDataParallel
    // ------------------------------------------------------------------------------------

    const VOCAB: usize = 11;
    const SEQ: usize = 6;

    /// A small causal Transformer (no dropout, so one process and several compute the same).
    #[derive(Module)]
    struct TinyTransformer {
        #[module]
        tok: Embedding,
        #[module]
        pos: Embedding,
        #[module]
        encoder: TransformerEncoder,
        #[module]
        norm: LayerNorm,
        #[module]
        head: Linear,
        #[base]
        base: ModuleBase,
    }

    impl Compute for TinyTransformer {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, idx: &Tensor) -> Tensor {
            let t = idx.shape()[1];
            let pos = Tensor::from_vec_i64((0..t as i64).collect(), &[t]);
            let x = self.tok.forward(idx) + self.pos.forward(&pos);
            let causal = Tensor::from_vec_bool((0..t * t).map(|k| k % t > k / t).collect(), &[t, t]);
            let h = self.encoder.forward(&EncoderInput::new(&x).src_mask(&causal));
            self.head.forward(&self.norm.forward(&h))
        }
    }

    fn tiny_transformer(seed: u64) -> TinyTransformer {
        manual_seed(seed);
        let d = 16;
        let cfg = TransformerEncoderLayerConfig {
            dim_feedforward: 32,
            dropout: 0.0,
            batch_first: true,
            norm_first: true,
            ..Default::default()
        };
        TinyTransformer {
            tok: Embedding::new(VOCAB, d),
            pos: Embedding::new(SEQ, d),
            encoder: TransformerEncoder::new(2, || TransformerEncoderLayer::with_config(d, 2, cfg), None),
            norm: LayerNorm::new(d),
            head: Linear::new(d, VOCAB),
            base: ModuleBase::new(),
        }
    }

    /// [`tiny_transformer`] in f64 (the parity tests' precision).
    fn tiny_transformer_f64(seed: u64) -> TinyTransformer {
        let mut m = tiny_transformer(seed);
        m.to_dtype(DType::F64);
        m
    }

    fn layers_policy() -> FsdpPolicy {
        FsdpPolicy::new().module_type::<TransformerEncoderLayer>()
    }

    /// Token windows and next-token targets of step `step`: `[12, SEQ]` each.
    fn token_batch(step: usize) -> (Tensor, Tensor) {
        let ids =
            |salt: usize| -> Vec<i64> { (0..12 * SEQ).map(|i| ((i * 5 + step * 3 + salt) % VOCAB) as i64).collect() };
        (Tensor::from_vec_i64(ids(0), &[12, SEQ]), Tensor::from_vec_i64(ids(1), &[12 * SEQ]))
    }

    fn lm_loss(logits: &Tensor, y: &Tensor) -> Tensor {
        let n = y.shape()[0];
        cross_entropy(&logits.reshape(&[n, VOCAB]), y)
    }

    fn fsdp_step(fsdp: &FullyShardedDataParallel<TinyTransformer>, opt: &mut AdamW, group: &ProcessGroup, step: usize) {
        let (x, y) = token_batch(step);
        let (xs, ys) =
            (share(group, &x), share(group, &y.reshape(&[12, SEQ])).reshape(&[12 / group.world_size() * SEQ]));
        opt.zero_grad();
        lm_loss(&fsdp.forward(&xs), &ys).backward();
        opt.step();
    }

    fn adamw() -> AdamWConfig {
        AdamWConfig { lr: 3e-3, weight_decay: 0.05, ..Default::default() }
    }

    /// ZeRO over DDP on the causal Transformer, 20 AdamW steps with gradient clipping, in
    /// f64 (see [`fsdp_transformer_parity`] for why): within 1e-5 of one process on the
    /// whole batch, every rank's parameters bit for bit alike; with the optimizer state
    /// sharded (stage 1), then the gradients too (stage 2), where each rank holds only the
    /// gradients it steps.
    fn zero_transformer_parity(group: &ProcessGroup) {
        for shard_gradients in [false, true] {
            zero_transformer_parity_with(group, shard_gradients);
        }
        // A wrapper over other parameters is refused.
        let ddp = DistributedDataParallel::new(mlp(), group).unwrap();
        let other = DistributedDataParallel::new(mlp(), group).unwrap();
        let mut zero = ZeroRedundancyOptimizer::new(ddp.named_parameters(), group, |g| AdamW::new(g, adamw())).unwrap();
        let err = zero.shard_gradients(&other).unwrap_err().to_string();
        assert!(err.contains("the wrapper's parameter `0.weight` is not one of this optimizer's"), "{err}");
        assert!(!zero.gradients_sharded());
    }

    fn zero_transformer_parity_with(group: &ProcessGroup, shard_gradients: bool) {
        let reference = tiny_transformer_f64(8);
        let mut ref_opt = AdamW::new(reference.named_parameters(), adamw());
        let ddp = DistributedDataParallel::new(tiny_transformer_f64(8), group).unwrap();
        let mut zero = ZeroRedundancyOptimizer::new(ddp.named_parameters(), group, |g| AdamW::new(g, adamw())).unwrap();
        if shard_gradients {
            zero.shard_gradients(&ddp).unwrap();
        }
        let mine = zero.partition()[group.rank()].len();
        for step in 0..20 {
            let (x, y) = token_batch(step);
            ref_opt.zero_grad();
            lm_loss(&reference.forward(&x), &y).backward();
            let want_norm = nn_core::optim::clip_grad_norm_(&reference.parameters(), 0.5);
            ref_opt.step();
            let ys = share(group, &y.reshape(&[12, SEQ])).reshape(&[12 / group.world_size() * SEQ]);
            zero.zero_grad();
            lm_loss(&ddp.forward(&share(group, &x)), &ys).backward();
            let held = ddp.parameters().iter().filter(|p| p.grad().is_some()).count();
            assert_eq!(held, if shard_gradients { mine } else { ddp.parameters().len() }, "gradients held");
            let norm = zero.clip_grad_norm_(0.5);
            assert!((norm - want_norm).abs() <= 1e-9 * want_norm, "norm {norm} vs one process's {want_norm}");
            zero.step();
        }
        let values =
            |m: &dyn Module| -> Vec<f64> { m.parameters().iter().flat_map(|p| p.to_vec_of::<f64>()).collect() };
        let (got, want) = (values(&ddp), values(&reference));
        let bits: Vec<f32> = got
            .iter()
            .flat_map(|v| [f32::from_bits(v.to_bits() as u32), f32::from_bits((v.to_bits() >> 32) as u32)])
            .collect();
        assert!(identical_across_ranks(group, &bits), "parameters differ across ranks after 20 ZeRO AdamW steps");
        let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(
            d <= 1e-5,
            "ZeRO (gradients sharded: {shard_gradients}) AdamW on the Transformer after 20 steps vs one process: max \
             |difference| {d:e}"
        );
        let moved = got.iter().zip(values(&tiny_transformer_f64(8))).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(moved > 1e-2, "training moved the parameters");
    }

    fn fsdp_policy_and_construction(group: &ProcessGroup) {
        let paths = layers_policy().units(&tiny_transformer(1));
        assert_eq!(paths, ["encoder.layers.0", "encoder.layers.1"]);
        // Size-based, bottom-up: attention blocks (1088 elements) are wrapped at 1000, and the
        // rest of each layer (1136) too; at 1500 only whole layers (2224) are.
        let by_size = |n| FsdpPolicy::new().min_params(n).units(&tiny_transformer(1));
        assert_eq!(
            by_size(1000),
            ["encoder.layers.0", "encoder.layers.0.self_attn", "encoder.layers.1", "encoder.layers.1.self_attn"]
        );
        assert_eq!(by_size(1500), ["encoder.layers.0", "encoder.layers.1"]);
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(1), group, layers_policy()).unwrap();
        assert_eq!(fsdp.unit_paths(), ["", "encoder.layers.0", "encoder.layers.1"]);
        let names = fsdp.unit_parameter_names();
        assert_eq!(names[0], ["tok.weight", "pos.weight", "norm.weight", "norm.bias", "head.weight", "head.bias"]);
        assert_eq!(names[1][0], "encoder.layers.0.self_attn.in_proj_weight");
        // The optimizer's parameters: one block per unit, of ceil(numel / world) elements.
        let shards = fsdp.named_parameters();
        let keys: Vec<&str> = shards.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(keys, ["flat_param", "encoder.layers.0.flat_param", "encoder.layers.1.flat_param"]);
        let model = tiny_transformer(1);
        let root: usize =
            ["tok", "pos", "norm", "head"].iter().map(|m| model.get_submodule(m).unwrap().num_parameters()).sum();
        assert_eq!(shards[0].1.numel(), root.div_ceil(group.world_size()));
        assert_eq!(fsdp.shard_bytes(), shards.iter().map(|(_, p)| p.numel() * 4).sum::<usize>());
        // A wrapped model stays on the CPU and in the dtype it was sharded in.
        let mut fsdp = fsdp;
        let err = fsdp.try_to_device(Device::Gpu(0)).unwrap_err().to_string();
        assert!(err.contains("FullyShardedDataParallel keeps its shards on the CPU"), "{err}");
        fsdp.to_device(Device::Cpu);
        fsdp.to_dtype(DType::F32); // another dtype panics: the `fsdp_to_dtype` launch
        assert!(fsdp.named_parameters().iter().all(|(_, p)| p.dtype() == DType::F32 && p.device() == Device::Cpu));
        // Boxed, the wrapper keeps its own rules (the box used the defaults); inside a
        // parent, a conversion that would change the shards is refused before anything
        // changes, and one that changes nothing is accepted.
        let mut boxed: Box<dyn Module> = Box::new(fsdp);
        let err = boxed.try_to_device(Device::Gpu(0)).unwrap_err().to_string();
        assert!(err.contains("FullyShardedDataParallel keeps its shards on the CPU"), "{err}");
        #[derive(Module)]
        struct Parent {
            #[module]
            inner: Box<dyn Module>,
        }
        let mut parent = Parent { inner: boxed };
        let err = parent.try_to_device(Device::Meta).unwrap_err().to_string();
        assert!(err.contains("FullyShardedDataParallel inside the module converted cannot follow"), "{err}");
        parent.to_device(Device::Cpu); // changes nothing: accepted
        parent.to_dtype(DType::F32);
        // (`parent.to_dtype` panics: the `fsdp_parent_to_dtype` launch.)
        // A policy type the model does not have wrapped nothing (all in the root unit).
        let err = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<nn_layers::Conv2d>())
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("the policy wraps modules of type `nn_layers::conv::Conv2d`, and the model has none"),
            "{err}"
        );
        // A zero timeout, and models that differ across ranks, on every rank.
        let zero = FsdpConfig { timeout: Some(Duration::ZERO), ..Default::default() };
        assert!(matches!(
            FullyShardedDataParallel::with_config(mlp(), group, FsdpPolicy::new(), zero),
            Err(DistError::ZeroTimeout { .. })
        ));
        let last = group.world_size() - 1;
        let out = if group.rank() == last && last > 0 { 5 } else { 4 };
        let model = Sequential::new().add(Linear::new(3, 3)).add(Linear::new(3, out));
        match FullyShardedDataParallel::new(model, group, FsdpPolicy::new().module_type::<Linear>()) {
            Ok(_) => assert_eq!(last, 0),
            Err(e) => assert_eq!(
                e.to_string(),
                format!(
                    "FullyShardedDataParallel::new: the model differs across ranks: `1.weight` is [4, 3] f32 on rank 0 \
                     but [5, 3] f32 on rank {last}"
                )
            ),
        }
        let frozen = mlp();
        frozen.get_submodule("0").unwrap().requires_grad_(false);
        let err = FullyShardedDataParallel::new(frozen, group, FsdpPolicy::new()).err().expect("refused");
        assert!(err.to_string().contains("parameter `0.weight` of shape [32, 6] does not require grad"), "{err}");
        // A weight tied between two units is refused by name; tied within the root is fine.
        let tied = || {
            let a = Linear::new(4, 4);
            let mut b = Linear::new(4, 4);
            b.weight = a.weight.clone();
            Sequential::new().add(a).add(ReLU::new()).add(b)
        };
        let err = FullyShardedDataParallel::new(tied(), group, FsdpPolicy::new().module_type::<Linear>())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("parameter `0.weight` (unit `0`) is also `2.weight` (unit `2`)"), "{err}");
        assert!(FullyShardedDataParallel::new(tied(), group, FsdpPolicy::new()).is_ok());
    }

    /// In f64: AdamW divides each gradient by its own running magnitude, so an element whose
    /// gradient is zero but for rounding (the attention's key bias: softmax ignores a shift
    /// shared by every key) takes lr-sized steps in the direction of its rounding noise, and
    /// an f32 run on a different summation order drifts by ~1e-4 there. In f64 that noise is
    /// far below AdamW's eps.
    fn fsdp_transformer_parity(group: &ProcessGroup) {
        let reference = tiny_transformer_f64(21);
        let mut ref_opt = AdamW::new(reference.named_parameters(), adamw());
        let fsdp = FullyShardedDataParallel::new(tiny_transformer_f64(21), group, layers_policy()).unwrap();
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        let before = fsdp.stats();
        for step in 0..20 {
            let (x, y) = token_batch(step);
            ref_opt.zero_grad();
            lm_loss(&reference.forward(&x), &y).backward();
            ref_opt.step();
            fsdp_step(&fsdp, &mut opt, group, step);
        }
        // Three units a step: each gathered once in forward (the two layers prefetched) and
        // reduce-scattered once, the two layers' while backward still ran through the root's
        // embeddings.
        let s = fsdp.stats();
        assert_eq!(s.gathers - before.gathers, 60);
        assert_eq!(s.prefetched - before.prefetched, 40);
        // Each unit gathered again for its backward (the root first, since the loss's
        // gradient reaches its output first); the two layers' all-gathers started while the
        // unit before them in backward ran.
        assert_eq!(s.backward_gathers - before.backward_gathers, 60);
        assert_eq!(s.backward_prefetched - before.backward_prefetched, 40);
        assert_eq!(s.reduce_scatters - before.reduce_scatters, 60);
        assert_eq!(s.overlapped_reduce_scatters - before.overlapped_reduce_scatters, 40);
        // Replicated values agree bit for bit: the logits of one input on every rank.
        let (x, _) = token_batch(99);
        let logits = no_grad(|| fsdp.forward(&x)).to_vec_of::<f64>();
        let bits: Vec<f32> = logits
            .iter()
            .flat_map(|v| {
                let b = v.to_bits();
                [f32::from_bits(b as u32), f32::from_bits((b >> 32) as u32)]
            })
            .collect();
        assert!(identical_across_ranks(group, &bits), "the ranks' logits differ");
        let want = reference.state_dict();
        let values =
            |sd: &nn_core::StateDict| -> Vec<f64> { sd.iter().flat_map(|(_, t)| t.to_vec_of::<f64>()).collect() };
        let diff = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        if let Some(full) = fsdp.full_state_dict() {
            assert_eq!(full.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
            let d = diff(&values(&full), &values(&want));
            assert!(d <= 1e-5, "FSDP AdamW after 20 steps vs one process: max |difference| {d:e}");
            assert!(
                diff(&values(&full), &values(&tiny_transformer_f64(21).state_dict())) > 1e-2,
                "training moved them"
            );
        }
        let d = diff(&logits, &no_grad(|| reference.forward(&x)).to_vec_of::<f64>());
        assert!(d <= 1e-5, "logits after 20 steps: max |difference| {d:e}");
    }

    /// The same 20 steps in f32. The attention's key bias has a true gradient of zero
    /// (softmax ignores a shift shared by every key), so AdamW steps it by its rounding
    /// noise, which differs with the summation order; and for the same reason it has no
    /// effect on anything else. Every other value, and the logits, match within 1e-5.
    fn fsdp_transformer_parity_f32(group: &ProcessGroup) {
        let reference = tiny_transformer(22);
        let mut ref_opt = AdamW::new(reference.named_parameters(), adamw());
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(22), group, layers_policy()).unwrap();
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        for step in 0..20 {
            let (x, y) = token_batch(step);
            ref_opt.zero_grad();
            lm_loss(&reference.forward(&x), &y).backward();
            ref_opt.step();
            fsdp_step(&fsdp, &mut opt, group, step);
        }
        let (x, _) = token_batch(99);
        let logits = no_grad(|| fsdp.forward(&x)).to_vec();
        assert!(identical_across_ranks(group, &logits), "the ranks' logits differ");
        let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        let d = diff(&logits, &no_grad(|| reference.forward(&x)).to_vec());
        assert!(d <= 1e-5, "f32 logits after 20 steps: max |difference| {d:e}");
        if let Some(full) = fsdp.full_state_dict() {
            let want = reference.state_dict();
            for (key, t) in want.iter() {
                let (mut got, mut exp) = (full.get(key).expect("same keys").to_vec(), t.to_vec());
                if key.ends_with("self_attn.in_proj_bias") {
                    // [q | k | v]: leave the key third out.
                    let e = got.len() / 3;
                    got.drain(e..2 * e);
                    exp.drain(e..2 * e);
                }
                let d = diff(&got, &exp);
                assert!(d <= 1e-5, "f32 `{key}` after 20 AdamW steps vs one process: max |difference| {d:e}");
            }
        }
    }

    /// Units inside units (each layer's attention, then the rest of the layer), without
    /// prefetch, with and without resharding after forward: 5 AdamW steps in f64 equal one
    /// process's.
    fn fsdp_nested_units(group: &ProcessGroup) {
        for reshard in [true, false] {
            fsdp_nested_units_with(group, reshard);
        }
    }

    fn fsdp_nested_units_with(group: &ProcessGroup, reshard: bool) {
        let reference = tiny_transformer_f64(4);
        let mut ref_opt = AdamW::new(reference.named_parameters(), adamw());
        let config = FsdpConfig {
            forward_prefetch: false,
            backward_prefetch: false,
            reshard_after_forward: reshard,
            ..Default::default()
        };
        let fsdp = FullyShardedDataParallel::with_config(
            tiny_transformer_f64(4),
            group,
            FsdpPolicy::new().min_params(1000),
            config,
        )
        .unwrap();
        assert_eq!(fsdp.unit_paths().len(), 5);
        assert_eq!(fsdp.unit_parameter_names()[2][0], "encoder.layers.0.self_attn.in_proj_weight");
        assert_eq!(fsdp.unit_parameter_names()[1][0], "encoder.layers.0.linear1.weight");
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        for step in 0..5 {
            let (x, y) = token_batch(step);
            ref_opt.zero_grad();
            lm_loss(&reference.forward(&x), &y).backward();
            ref_opt.step();
            fsdp_step(&fsdp, &mut opt, group, step);
        }
        let s = fsdp.stats();
        assert_eq!((s.prefetched, s.backward_prefetched), (0, 0));
        // Five units gathered in each forward, and again in each backward when resharding.
        assert_eq!((s.gathers, s.backward_gathers), (25, if reshard { 25 } else { 0 }));
        let (x, _) = token_batch(50);
        let got = no_grad(|| fsdp.forward(&x)).to_vec_of::<f64>();
        let want = no_grad(|| reference.forward(&x)).to_vec_of::<f64>();
        let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(d <= 1e-9, "nested units after 5 steps: max |difference| {d:e}");
    }

    fn fsdp_frees_outside_forward(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(3), group, layers_policy()).unwrap();
        let all = fsdp.module().parameters();
        let materialized = {
            let all = all.clone();
            move || all.iter().filter(|p| p.device() != Device::Meta).map(|p| p.numel()).sum::<usize>()
        };
        assert_eq!(materialized(), 0, "no parameter holds values outside a forward");
        // Inside layer 1's forward: the root, layer 1 and nothing else (layer 0 was freed,
        // and no unit follows to prefetch).
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let count = materialized.clone();
        let layer1 = fsdp.module().encoder.layers[1]
            .register_forward_pre_hook(move |_| {
                log.lock().unwrap().push(count());
                None
            })
            .unwrap();
        // In backward, when layer 0's last weight has its gradient: the root and layer 0
        // (layer 1 was freed once its own gradients were in; layer 0 was gathered again).
        let in_backward = Arc::new(Mutex::new(Vec::new()));
        let log = in_backward.clone();
        let count = materialized.clone();
        let layer0_first = fsdp.module().encoder.layers[0].self_attn.in_proj_weight.clone();
        let layer0_hook = layer0_first.register_post_accumulate_grad_hook(move |_| log.lock().unwrap().push(count()));
        let (x, y) = token_batch(0);
        let loss = lm_loss(&fsdp.forward(&x), &y);
        // Between forward and backward no parameter holds values (and autograd's saved
        // views of them share their storage: nn-core's tests check those are freed too).
        assert_eq!(materialized(), 0);
        loss.backward();
        let model = tiny_transformer(3);
        let root: usize =
            ["tok", "pos", "norm", "head"].iter().map(|m| model.get_submodule(m).unwrap().num_parameters()).sum();
        let layer = model.encoder.layers[1].num_parameters();
        assert_eq!(*seen.lock().unwrap(), [root + layer]);
        assert_eq!(*in_backward.lock().unwrap(), [root + model.encoder.layers[0].num_parameters()]);
        layer0_hook.remove();
        assert_eq!(materialized(), 0);
        // Gradients: the shards', of the shards' shape; the model's own are freed.
        assert!(all.iter().all(|p| p.grad().is_none()));
        for (_, s) in fsdp.named_parameters() {
            assert_eq!(s.grad().expect("a shard gradient").shape(), s.shape());
        }
        layer1.remove();
        // A freed parameter is a meta tensor: using it outside its unit fails (on a device
        // mismatch) instead of reading stale values.
        assert_eq!(fsdp.module().head.weight.device(), Device::Meta);
        assert_eq!(fsdp.module().head.weight.shape(), &[VOCAB, 16]);
    }

    /// An overflow in one rank's shard only: with a `ShardedGradScaler` every rank skips
    /// that step and backs off to the same scale (a plain `GradScaler` would skip on that
    /// rank alone).
    fn fsdp_sharded_grad_scaler(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(6), group, layers_policy()).unwrap();
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        let mut scaler = ShardedGradScaler::new(GradScaler::new(), group);
        let shards = fsdp.parameters();
        let values = || shards.iter().flat_map(|p| p.to_vec()).collect::<Vec<f32>>();
        let last = group.world_size() - 1;
        for step in 0..3 {
            let (x, y) = token_batch(step);
            let (xs, ys) =
                (share(group, &x), share(group, &y.reshape(&[12, SEQ])).reshape(&[12 / group.world_size() * SEQ]));
            opt.zero_grad();
            scaler.scale(&lm_loss(&fsdp.forward(&xs), &ys)).backward();
            let before = values();
            if step == 1 && group.rank() == last {
                let g = shards[1].grad().expect("a shard gradient");
                let mut v = g.to_vec();
                v[0] = f32::INFINITY;
                shards[1].set_grad(Some(Tensor::from_vec(v, g.shape())));
            }
            let outcome = scaler.step(&mut opt);
            scaler.update();
            assert_eq!(outcome.stepped(), step != 1, "step {step} on rank {}", group.rank());
            assert_eq!(values() == before, step == 1, "step {step} on rank {}", group.rank());
        }
        assert_eq!(scaler.get_scale(), 32768.0, "on rank {}", group.rank());
    }

    fn fsdp_full_state_dict(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(5), group, layers_policy()).unwrap();
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        fsdp_step(&fsdp, &mut opt, group, 0);
        let full = fsdp.full_state_dict();
        assert_eq!(full.is_some(), group.rank() == 0);
        // Into a fresh wrapper of another initialisation: its state becomes the first one's.
        let other = FullyShardedDataParallel::new(tiny_transformer(6), group, layers_policy()).unwrap();
        other.load_full_state_dict(full.as_ref()).unwrap();
        let (x, _) = token_batch(1);
        let a = no_grad(|| fsdp.forward(&x)).to_vec();
        assert_eq!(no_grad(|| other.forward(&x)).to_vec(), a, "loaded the full state bit for bit");
        // And into the unwrapped model, under PyTorch's names.
        if let Some(full) = &full {
            let mut plain = tiny_transformer(7);
            plain.load_state_dict(full, true).unwrap();
            assert_eq!(no_grad(|| plain.forward(&x)).to_vec(), a);
        }
        // A state dict from another model: refused on every rank, nothing loaded.
        let wrong = (group.rank() == 0).then(|| {
            let mut sd = mlp().state_dict();
            sd.insert("head.weight".into(), Tensor::zeros(&[3, 16]));
            sd
        });
        let err = other.load_full_state_dict(wrong.as_ref()).expect_err("refused").to_string();
        assert!(
            err.starts_with(
                "FullyShardedDataParallel::load_full_state_dict: rank 0: the state dict does not fit the model"
            ) && err.contains("`tok.weight` is missing")
                && err.contains("`head.weight` has shape [3, 16] where the model has [11, 16]"),
            "{err}"
        );
        assert_eq!(no_grad(|| other.forward(&x)).to_vec(), a, "nothing was loaded");
    }

    fn fsdp_sharded_checkpoint(group: &ProcessGroup) {
        let (rank, world) = (group.rank(), group.world_size());
        let pid = group.broadcast(&Tensor::from_vec_i64(vec![std::process::id() as i64], &[1]), 0).to_vec_i64()[0];
        let dir = std::env::temp_dir().join(format!("nn-fsdp-ckpt-{pid}"));
        if rank == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        group.barrier();
        let fsdp = FullyShardedDataParallel::new(tiny_transformer(8), group, layers_policy()).unwrap();
        let mut opt = AdamW::new(fsdp.named_parameters(), adamw());
        for step in 0..3 {
            fsdp_step(&fsdp, &mut opt, group, step);
        }
        let path = fsdp.shard_path(&dir);
        assert_eq!(path.file_name().unwrap().to_str().unwrap(), format!("rank{rank}-of-{world}.safetensors"));
        fsdp.save_sharded(&path, &opt).unwrap();
        group.barrier();
        // Resume into a fresh wrapper and optimizer: both runs go on identically.
        let resumed = FullyShardedDataParallel::new(tiny_transformer(9), group, layers_policy()).unwrap();
        let mut resumed_opt = AdamW::new(resumed.named_parameters(), adamw());
        resumed.load_sharded(&path, &mut resumed_opt).unwrap();
        for step in 3..6 {
            fsdp_step(&fsdp, &mut opt, group, step);
            fsdp_step(&resumed, &mut resumed_opt, group, step);
        }
        let (x, _) = token_batch(7);
        let a = no_grad(|| fsdp.forward(&x)).to_vec();
        assert_eq!(no_grad(|| resumed.forward(&x)).to_vec(), a, "the resumed run equals the uninterrupted one");

        let fresh = FullyShardedDataParallel::new(tiny_transformer(10), group, layers_policy()).unwrap();
        let mut fresh_opt = AdamW::new(fresh.named_parameters(), adamw());
        let untouched = no_grad(|| fresh.forward(&x)).to_vec();
        let check_refused = |file: &std::path::Path, opt: &mut AdamW, want: &str| {
            let err = fresh.load_sharded(file, opt).expect_err("refused").to_string();
            assert!(err.starts_with("FullyShardedDataParallel::load_sharded: rank "), "{err}");
            assert!(err.contains(want), "{err} lacks {want:?}");
            assert_eq!(no_grad(|| fresh.forward(&x)).to_vec(), untouched, "nothing was loaded");
            assert!(opt.state_dict().tensors.is_empty(), "the optimizer state was not loaded");
        };
        // Another rank's file (rank 0 reads its own: the others fail, and so does rank 0).
        if world > 1 {
            let other = dir.join(format!("rank{}-of-{world}.safetensors", (rank + world - 1) % world));
            let mine = if rank == 0 { path.clone() } else { other };
            check_refused(&mine, &mut fresh_opt, "rank 1: ");
            check_refused(&mine, &mut fresh_opt, "holds rank 0's shard, not rank 1's");
        }
        // A file written by a world of another size: rewrite this rank's with one more rank.
        let (sd, mut meta) = nn_core::StateDict::load_with_metadata(&path).unwrap();
        meta.insert("nn.fsdp.world_size".into(), (world + 1).to_string());
        let foreign = dir.join(format!("foreign-{rank}.safetensors"));
        sd.save_with_metadata(&foreign, Some(meta.clone())).unwrap();
        check_refused(
            &foreign,
            &mut fresh_opt,
            &format!("was saved by a world of {} rank(s), this one has {world}", world + 1),
        );
        // Another model (another layout), and a missing file.
        meta.insert("nn.fsdp.world_size".into(), world.to_string());
        meta.insert("nn.fsdp.layout".into(), "=10/5".into());
        sd.save_with_metadata(&foreign, Some(meta)).unwrap();
        check_refused(&foreign, &mut fresh_opt, "was saved from another model");
        check_refused(&dir.join("nothing-here"), &mut fresh_opt, "cannot read");
        group.barrier();
        if rank == 0 {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    fn fsdp_model_converted(group: &ProcessGroup) {
        let mut fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        fsdp.module_mut().to_dtype(DType::F64);
        fsdp.forward(&Tensor::ones(&[2, 6]).to_dtype(DType::F64));
        unreachable!("the forward should have panicked");
    }

    fn fsdp_parent_converted(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        #[derive(Module)]
        struct Parent {
            #[module]
            inner: Box<dyn Module>,
        }
        let mut parent = Parent { inner: Box::new(fsdp) };
        parent.to_dtype(DType::F64);
        unreachable!("to_dtype should have panicked");
    }

    fn fsdp_wrapper_converted(group: &ProcessGroup) {
        let mut fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        fsdp.to_dtype(DType::F64);
        unreachable!("to_dtype should have panicked");
    }

    fn fsdp_model_changed(group: &ProcessGroup) {
        let mut fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        let replacement: Box<dyn nn_core::Layer> = Box::new(Linear::new(32, 16));
        fsdp.module_mut().set_submodule("2", replacement).unwrap();
        fsdp.forward(&Tensor::ones(&[2, 6]));
        unreachable!("the forward should have panicked");
    }

    fn a_no_grad_forward_before_backward(group: &ProcessGroup) {
        manual_seed(31);
        let x = Tensor::randn(&[12, 6]);
        let y = labels(12, 3, 4);
        manual_seed(5);
        let reference = mlp();
        cross_entropy(&reference.forward(&x), &y).backward();
        manual_seed(5);
        let ddp = DistributedDataParallel::with_config(mlp(), group, small_buckets()).unwrap();
        let loss = cross_entropy(&ddp.forward(&share(group, &x)), &share(group, &y));
        // A target or metric computed with the same network, without grad: the pending
        // backward is still averaged (not left local, unaveraged).
        no_grad(|| ddp.forward(&share(group, &x)));
        loss.backward();
        assert_close(&grads_of(&ddp), &grads_of(&reference), 1e-6, "gradients vs one process");
        assert!(identical_across_ranks(group, &grads_of(&ddp)));
    }

    fn find_unused_with_no_sync(group: &ProcessGroup) {
        let config = DdpConfig { find_unused_parameters: true, ..small_buckets() };
        manual_seed(12);
        let x = Tensor::randn(&[group.world_size() * 2, 4]);
        // Rank 0 uses the second head in an accumulation pass, nobody in the synchronised
        // one: it is used, and every rank gets the average of the accumulated gradients.
        let mut ddp = DistributedDataParallel::with_config(two_heads(group, vec![0]), group, config).unwrap();
        ddp.no_sync(|| ddp.forward(&share(group, &x)).square().sum().backward());
        let local = ddp.module().unused.weight.grad().map(|g| g.to_vec());
        ddp.module_mut().users = vec![];
        ddp.forward(&share(group, &x)).square().sum().backward();
        let got = ddp.module().unused.weight.grad().expect("the head was used inside no_sync").to_vec();
        assert!(identical_across_ranks(group, &got), "the head's gradient differs across ranks");
        if group.rank() == 0 {
            let w = group.world_size() as f32;
            let want: Vec<f32> = local.unwrap().iter().map(|g| g / w).collect();
            assert_close(&got, &want, 1e-6, "rank 0's accumulated gradient, averaged");
        }
    }

    fn lazy_layers_are_refused(group: &ProcessGroup) {
        let lazy = Sequential::new().add(nn_layers::LazyLinear::new(4));
        let e = DistributedDataParallel::new(lazy, group).err().expect("refused").to_string();
        assert!(e.contains("lazy layers whose parameters are not initialised yet"), "{e}");
        let lazy = Sequential::new().add(nn_layers::LazyLinear::new(4));
        let e = FullyShardedDataParallel::new(lazy, group, FsdpPolicy::new()).err().expect("refused").to_string();
        assert!(e.contains("lazy layers whose parameters are not initialised yet (`0`)"), "{e}");
    }

    fn dropped_zero_lifts_its_mask(group: &ProcessGroup) {
        manual_seed(5);
        let ddp = DistributedDataParallel::with_config(mlp(), group, small_buckets()).unwrap();
        let mut zero =
            ZeroRedundancyOptimizer::new(ddp.named_parameters(), group, |g| Sgd::new(g, SgdConfig::default())).unwrap();
        zero.shard_gradients(&ddp).unwrap();
        drop(zero);
        // Trained on with a plain optimizer: every rank keeps every averaged gradient
        // (dropping the optimizer lifts its mask, which drops the other ranks' gradients).
        manual_seed(8);
        let (x, y) = (Tensor::randn(&[12, 6]), labels(12, 3, 2));
        cross_entropy(&ddp.forward(&share(group, &x)), &share(group, &y)).backward();
        assert!(ddp.parameters().iter().all(|p| p.grad().is_some()), "a gradient was dropped");
        assert!(identical_across_ranks(group, &grads_of(&ddp)));
    }

    fn sync_batch_norm_inside_fsdp(group: &ProcessGroup) {
        let model = Sequential::new().add(Linear::new(4, 4)).add(BatchNorm1d::new(4));
        let mut fsdp = FullyShardedDataParallel::new(model, group, FsdpPolicy::new()).unwrap();
        // The wrapper's `apply` reaches the model's layers: its one batch norm is converted.
        assert_eq!(SyncBatchNorm::convert_sync_batchnorm(&mut fsdp, group), 1);
        assert!(fsdp.module().get::<BatchNorm1d>(1).unwrap().is_synced());
    }

    fn ddp_unfrozen(group: &ProcessGroup) {
        let model = mlp();
        model.get_submodule("0").unwrap().requires_grad_(false);
        let ddp = DistributedDataParallel::new(model, group).unwrap();
        ddp.module().get_submodule("0").unwrap().requires_grad_(true);
        ddp.forward(&Tensor::ones(&[2, 6]));
        unreachable!("the forward should have panicked");
    }

    fn ddp_converted(group: &ProcessGroup) {
        let mut ddp = DistributedDataParallel::new(mlp(), group).unwrap();
        ddp.to_dtype(DType::F64);
        ddp.forward(&Tensor::ones(&[2, 6]).to_dtype(DType::F64));
        unreachable!("the forward should have panicked");
    }

    fn ddp_second_backward(group: &ProcessGroup) {
        let ddp = DistributedDataParallel::new(mlp(), group).unwrap();
        let y = ddp.forward(&Tensor::ones(&[2, 6]));
        y.sum().backward_with(&Tensor::scalar(1.0), true);
        y.square().sum().backward();
        unreachable!("the second backward should have panicked");
    }

    fn fsdp_frozen(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        fsdp.module().get_submodule("0").unwrap().requires_grad_(false);
        fsdp.forward(&Tensor::ones(&[2, 6]));
        unreachable!("the forward should have panicked");
    }

    fn fsdp_step_mid(group: &ProcessGroup) {
        let fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        let mut opt = Sgd::new(fsdp.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
        // A first step, so that every shard has a gradient.
        fsdp.forward(&Tensor::ones(&[2, 6])).sum().backward();
        opt.step();
        let loss = fsdp.forward(&Tensor::ones(&[2, 6])).sum();
        opt.step();
        loss.backward();
        unreachable!("the backward should have panicked");
    }

    fn fsdp_no_grad_mid(group: &ProcessGroup) {
        // Units kept gathered after the forward: the backward's gradients land on the full
        // parameters, where nothing reduced them once the forward without grad disarmed.
        no_grad_forward_before_backward(group, false);
    }

    fn fsdp_no_grad_mid_resharded(group: &ProcessGroup) {
        // The default: units are freed after the forward and gathered again by the backward,
        // which names the forward without grad that disarmed it.
        no_grad_forward_before_backward(group, true);
    }

    /// A training forward, a forward without grad, then the first one's backward (which
    /// must panic).
    fn no_grad_forward_before_backward(group: &ProcessGroup, reshard_after_forward: bool) {
        let config = FsdpConfig { reshard_after_forward, ..Default::default() };
        let policy = FsdpPolicy::new().module_type::<Linear>();
        let fsdp = FullyShardedDataParallel::with_config(mlp(), group, policy, config).unwrap();
        let loss = fsdp.forward(&Tensor::ones(&[2, 6])).sum();
        no_grad(|| fsdp.forward(&Tensor::ones(&[2, 6])));
        loss.backward();
        unreachable!("the backward should have panicked");
    }

    fn fsdp_no_grad_after_an_abandoned_forward(group: &ProcessGroup) {
        // A training forward whose backward never runs (a NaN loss skipped), then
        // evaluation without grad: fine.
        let fsdp = FullyShardedDataParallel::new(mlp(), group, FsdpPolicy::new().module_type::<Linear>()).unwrap();
        let _skipped = fsdp.forward(&Tensor::ones(&[2, 6]));
        let y = no_grad(|| fsdp.forward(&Tensor::ones(&[2, 6])));
        assert_eq!(y.shape(), &[2, 3]);
    }
}
