//! CustomResourceDefinitions (upstream's apiextensions-apiserver, inside this server): the
//! CRD object's own validation and status, the structural schema custom resources are
//! validated, pruned and defaulted with, and the controller that turns established CRDs into
//! resources the generic handlers serve.

pub mod cel;
pub mod controller;
pub mod conversion;
pub mod crd_validation;
pub mod naming;
pub mod printer;
pub mod schema;
pub mod serve;
