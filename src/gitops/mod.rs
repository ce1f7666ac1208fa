//! How GitOps tools read Moonin's objects: each kind's health in Argo CD's terms
//! ([`health`]) and the Argo CD configuration generated from it ([`argocd`]: one Lua health
//! check per kind and the `argocd-cm` ConfigMap that carries them, which `moonin argocd`
//! prints and `config/argocd/` commits).
//!
//! **Where this sits.** Above [`crate::api`], beside the controllers, below `main`. It is not
//! part of `api`: `api` holds the CRD types and the names the controllers share, and depends
//! on nothing above it, while a health rule describes what the *controllers* conclude (which
//! condition a controller sets, in which order the conditions matter, which reasons need a
//! person). It is not part of a controller either, because one artefact covers every kind of
//! every controller. It reads names from `api` (kinds, condition types and reasons, field
//! managers) and from nothing else in the crate; the few condition types that only one
//! controller writes, and keeps in its own module, are spelled here and checked against
//! `docs/reference.md` (which `tests/docs.rs` keeps in step with the code) by this module's
//! tests. Nothing in the crate depends on this module; only `main` (the `argocd`
//! subcommand) and the tests use it.

pub mod argocd;
pub mod health;
mod lua;
