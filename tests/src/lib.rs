//! Workspace-level integration tests live in `tests/`; this library only holds shared
//! fixtures helpers.
