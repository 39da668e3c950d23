//! The `#[derive(Module)]` ui suite: what compiles, and what does not with which error.
//! Each case opens with a comment saying what it checks; every compile-fail case has a
//! reviewed `.stderr` (regenerate with `TRYBUILD=overwrite cargo test -p nn-tests --test
//! ui`, then read the diff). The toolchain is pinned in `rust-toolchain.toml` so the
//! snapshots hold.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/01-all-kinds.rs");
    t.pass("ui/pass/02-tuple-struct.rs");
    t.pass("ui/pass/03-generic-module.rs");
    t.pass("ui/pass/04-option-fields.rs");
    t.pass("ui/pass/05-rename.rs");
    t.pass("ui/pass/06-boxed-dyn-layer.rs");
    t.pass("ui/pass/07-plain-data.rs");
    t.pass("ui/pass/08-unit-struct.rs");
    t.pass("ui/pass/09-extra-repr.rs");
    t.pass("ui/pass/10-facade.rs");
    t.pass("ui/pass/11-hooks-in-a-loop.rs");
    t.pass("ui/pass/12-several-inputs.rs");
    t.pass("ui/pass/13-name.rs");
    t.pass("ui/pass/14-deep-copy.rs");
    t.pass("ui/pass/15-state-dict-customisation.rs");
    t.pass("ui/pass/16-module-io-derive.rs");
    t.compile_fail("ui/fail/01-unannotated-vec.rs");
    t.compile_fail("ui/fail/02-unannotated-array.rs");
    t.compile_fail("ui/fail/03-unannotated-hashmap.rs");
    t.compile_fail("ui/fail/04-unannotated-option.rs");
    t.compile_fail("ui/fail/05-unannotated-box.rs");
    t.compile_fail("ui/fail/06-unannotated-tuple.rs");
    t.compile_fail("ui/fail/07-unannotated-tensor.rs");
    t.compile_fail("ui/fail/08-unannotated-parameter.rs");
    t.compile_fail("ui/fail/09-unannotated-vec-tensor.rs");
    t.compile_fail("ui/fail/10-unannotated-module-list.rs");
    t.compile_fail("ui/fail/11-unannotated-user-module.rs");
    t.compile_fail("ui/fail/12-unannotated-generic-module.rs");
    t.compile_fail("ui/fail/13-module-on-non-module.rs");
    t.compile_fail("ui/fail/14-module-on-vec.rs");
    t.compile_fail("ui/fail/15-module-on-hashmap.rs");
    t.compile_fail("ui/fail/16-param-on-tensor.rs");
    t.compile_fail("ui/fail/17-param-on-f32.rs");
    t.compile_fail("ui/fail/18-buffer-on-parameter.rs");
    t.compile_fail("ui/fail/19-buffer-on-vec.rs");
    t.compile_fail("ui/fail/20-unknown-option.rs");
    t.compile_fail("ui/fail/21-misspelled-attribute.rs");
    t.compile_fail("ui/fail/22-duplicate-attribute.rs");
    t.compile_fail("ui/fail/23-duplicate-option.rs");
    t.compile_fail("ui/fail/24-two-kinds.rs");
    t.compile_fail("ui/fail/25-bad-option-value.rs");
    t.compile_fail("ui/fail/26-rename-with-dot.rs");
    t.compile_fail("ui/fail/27-duplicate-name.rs");
    t.compile_fail("ui/fail/28-union.rs");
    t.compile_fail("ui/fail/29-enum.rs");
    t.compile_fail("ui/fail/30-unknown-struct-option.rs");
    t.compile_fail("ui/fail/31-three-mistakes.rs");
    t.compile_fail("ui/fail/32-base-misuse.rs");
    t.compile_fail("ui/fail/33-misplaced-attribute.rs");
    t.compile_fail("ui/fail/34-unannotated-wrapped.rs");
    t.compile_fail("ui/fail/35-extra-repr-without-impl.rs");
    t.compile_fail("ui/fail/36-base-without-compute.rs");
    t.compile_fail("ui/fail/37-compute-without-base.rs");
    t.compile_fail("ui/fail/38-hand-written-forward.rs");
    t.compile_fail("ui/fail/39-generic-base-narrower-compute.rs");
    t.compile_fail("ui/fail/40-bad-name.rs");
    t.compile_fail("ui/fail/41-name-given-twice.rs");
    t.compile_fail("ui/fail/42-tuple-mixing-data-and-layers.rs");
    t.compile_fail("ui/fail/43-unannotated-cells-and-locks.rs");
    t.compile_fail("ui/fail/44-calling-compute.rs");
    t.compile_fail("ui/fail/45-clone-on-a-module.rs");
    t.compile_fail("ui/fail/46-clone-on-a-module-with-a-base.rs");
    t.compile_fail("ui/fail/47-clone-on-a-generic-module.rs");
    t.compile_fail("ui/fail/48-forward-with-the-wrong-input.rs");
    t.compile_fail("ui/fail/49-extra-state-without-impl.rs");
    t.compile_fail("ui/fail/50-bad-state-dict-version.rs");
    t.compile_fail("ui/fail/51-migrate-without-impl.rs");
    t.compile_fail("ui/fail/52-module-io-without-primary.rs");
    t.compile_fail("ui/fail/53-module-io-field-without-slots.rs");
    t.compile_fail("ui/fail/54-tuple-input-part-without-slots.rs");
}
