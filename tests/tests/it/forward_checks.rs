//! The production guide's two costliest silent failures, made loud (issue 53 item 7): a
//! `Parameter` created while a module's forward runs (a layer built inside `compute`), and
//! a host read of a tensor that requires grad inside a training forward.

use nn_core::module::forward_checks::{forward_checks, with_forward_checks, ForwardChecks, Report};
use nn_core::{Compute, Forward, Module, ModuleBase, Tensor};
use nn_layers::{LazyBatchNorm1d, LazyLinear, Linear};

const STRICT: ForwardChecks = ForwardChecks { new_parameter: Report::Panic, host_read: Report::Panic };

/// The guide's bug: the layer is built inside the forward, so every call has new weights.
#[derive(Module)]
struct BuildsInForward {
    #[base]
    base: ModuleBase,
}

impl Compute for BuildsInForward {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        Linear::new(3, 2).forward(x)
    }
}

/// Reads its hidden values to the host and rebuilds them: the graph is cut there.
#[derive(Module)]
struct ReadsToHost {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for ReadsToHost {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let h = self.fc.forward(x);
        Tensor::from_vec(h.to_vec(), h.shape())
    }
}

/// Logs a value the right way: detached first.
#[derive(Module)]
struct LogsDetached {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for LogsDetached {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let h = self.fc.forward(x);
        let _mean = h.detach().mean().item();
        h
    }
}

fn panic_text(r: std::thread::Result<Tensor>) -> String {
    let Err(p) = r else { panic!("the check should have panicked") };
    p.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn a_parameter_created_in_a_forward_panics_naming_the_module_and_the_fix() {
    let m = BuildsInForward { base: ModuleBase::new() };
    let x = Tensor::ones(&[1, 3]);
    let text = panic_text(std::panic::catch_unwind(|| with_forward_checks(STRICT, || m.forward(&x))));
    assert!(text.contains("`BuildsInForward`"), "{text}");
    assert!(text.contains("linear.rs"), "the call site (`Linear::new`) is named: {text}");
    assert!(text.contains("build the layer in the module's constructor"), "{text}");
}

#[cfg(debug_assertions)]
#[test]
fn the_default_in_debug_builds_is_a_panic() {
    assert_eq!(forward_checks().new_parameter, Report::Panic);
    let m = BuildsInForward { base: ModuleBase::new() };
    let x = Tensor::ones(&[1, 3]);
    assert!(std::panic::catch_unwind(|| m.forward(&x)).is_err());
}

#[test]
fn warn_reports_and_runs_on() {
    let warn = ForwardChecks { new_parameter: Report::Warn, host_read: Report::Warn };
    let m = BuildsInForward { base: ModuleBase::new() };
    let y = with_forward_checks(warn, || m.forward(&Tensor::ones(&[1, 3])));
    assert_eq!(y.shape(), [1, 2]);
}

#[test]
fn parameters_outside_a_forward_and_lazy_layers_are_fine() {
    with_forward_checks(STRICT, || {
        let _outside = Linear::new(3, 2);
        let lazy = LazyLinear::new(4);
        assert_eq!(lazy.forward(&Tensor::ones(&[2, 5])).shape(), [2, 4]);
        let bn = LazyBatchNorm1d::new();
        assert_eq!(bn.forward(&Tensor::ones(&[2, 3])).shape(), [2, 3]);
        // After the forward, creation is checked again.
        let _after = Linear::new(3, 2);
    });
}

#[test]
fn a_host_read_in_a_training_forward_is_reported_naming_the_module() {
    let m = ReadsToHost { fc: Linear::new(3, 2), base: ModuleBase::new() };
    let x = Tensor::ones(&[1, 3]);
    let text = panic_text(std::panic::catch_unwind(|| with_forward_checks(STRICT, || m.forward(&x))));
    assert!(text.contains("`to_vec`"), "{text}");
    assert!(text.contains("training forward of `ReadsToHost`"), "{text}");
    assert!(text.contains("no gradient flows back"), "{text}");
}

#[test]
fn host_reads_that_cut_nothing_are_not_reported() {
    with_forward_checks(STRICT, || {
        // Detached first: the read is for logging.
        let m = LogsDetached { fc: Linear::new(3, 2), base: ModuleBase::new() };
        m.forward(&Tensor::ones(&[1, 3])).sum().backward();
        assert!(m.fc.weight.grad().is_some());
        // In eval, and without grad: nothing trains through it.
        let mut r = ReadsToHost { fc: Linear::new(3, 2), base: ModuleBase::new() };
        nn_core::no_grad(|| r.forward(&Tensor::ones(&[1, 3])));
        r.eval();
        r.forward(&Tensor::ones(&[1, 3]));
        // Outside any forward (reading the loss).
        let loss = r.fc.forward(&Tensor::ones(&[1, 3])).sum();
        let _ = loss.item();
    });
}
