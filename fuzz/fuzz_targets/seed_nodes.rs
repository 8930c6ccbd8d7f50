//! The answer of a contact point to `GET /bootstrap/seed-nodes`
//! (`convoke_bootstrap::probe::parse_seed_nodes`), which bootstrap reads from every node it
//! discovers, and the seed-node addresses it would join (`Address::from_str`, as
//! `convoke::bootstrap` parses them).
//!
//! Properties: nothing panics; an answer that parses serializes to JSON that parses back to it;
//! a seed-node address that parses prints as text that parses back to it.

#![no_main]

use convoke_bootstrap::probe::parse_seed_nodes;
use convoke_membership::Address;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(answer) = parse_seed_nodes(data) else { return };
    let json = serde_json::to_vec(&answer).expect("seed nodes serialize");
    let back = parse_seed_nodes(&json)
        .unwrap_or_else(|e| panic!("{answer:?} serialized as {json:?} does not parse: {e}"));
    assert_eq!(back, answer);
    let addresses =
        std::iter::once(&answer.self_node).chain(answer.seed_nodes.iter().map(|s| &s.node));
    for text in addresses {
        if let Ok(a) = text.parse::<Address>() {
            let printed = a.to_string();
            assert_eq!(
                printed.parse::<Address>().as_ref(),
                Ok(&a),
                "{text:?} printed as {printed:?}"
            );
        }
    }
});
