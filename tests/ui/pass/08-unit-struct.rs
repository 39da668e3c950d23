// A unit struct (and an empty braced struct) derive a module with no state.

use nn_core::Module;

#[derive(Module)]
struct Identity;

#[derive(Module)]
struct Empty {}

fn main() {
    assert_eq!(Identity.num_parameters(), 0);
    assert!(Identity.state_dict().is_empty());
    assert_eq!(Identity.to_string(), "Identity()");
    assert!(Empty {}.named_modules().len() == 1);
}
