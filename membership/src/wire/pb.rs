//! The types generated from `proto/convoke.proto`.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/convoke.membership.v1.rs"));
