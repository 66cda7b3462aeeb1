//! End-to-end tests of the `megastore` binary (see the crate docs for how it is found).

mod backfill;
mod bank;
mod cluster;
mod compare_etcd;
mod compose;
mod downstream;
mod email;
mod entities;
mod examples;
mod global_index;
mod index_kinds;
mod index_queries;
mod limits;
mod operations;
mod outcomes;
mod processes;
mod python_api;
mod queues;
mod roles;
mod schema_check;
mod support;
mod tidy;
mod tls;
mod tools;
mod top;
mod two_phase;
