//! The management API's parsers: the member address of `/cluster/members/{address}` (found among
//! the members by `convoke::management::find_member`, as the GET, PUT and DELETE routes do), the
//! address text of `POST /cluster/members` (`Address::from_str`), and the form bodies of the write
//! routes (`convoke::management::Form`, urlencoded or multipart, `operation=down` and friends).
//!
//! The first byte of the input picks what the rest is (its value modulo 5):
//! - 0: an address, as given in the route or the `address` field;
//! - 1: a form body sent as `application/x-www-form-urlencoded`;
//! - 2: a form body sent without a content type (read as urlencoded, as Akka does);
//! - 3: a form body sent as `multipart/form-data; boundary=BOUNDARY`;
//! - 4: a content type (up to the first newline), then the body sent with it.
//!
//! Properties: nothing panics; a member found is one whose address text is the one given (with
//! or without the scheme and leading slashes); every member is found by its own address text; an
//! address that parses prints as text that parses back to it; an urlencoded body is a form exactly
//! when it is urlencoded pairs, and a repeated field keeps its last value.

#![no_main]

use std::collections::BTreeSet;
use std::sync::LazyLock;

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::{HeaderValue, Request, header};
use convoke::management::{Form, find_member};
use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, CurrentClusterState, Member, MemberStatus, Uid, UniqueAddress};
use libfuzzer_sys::fuzz_target;

/// The members the routes look addresses up in.
static STATE: LazyLock<CurrentClusterState> = LazyLock::new(|| {
    let member = |text: &str, uid: u64| {
        let node = UniqueAddress::new(text.parse().unwrap(), Uid::new(uid).unwrap());
        let roles = BTreeSet::from(["dc-default".to_owned()]);
        Member::from_parts(node, UpNumber(1), MemberStatus::Up, roles, AppVersion::default())
    };
    CurrentClusterState {
        members: vec![
            member("convoke://Main@hostname.com:3311", 1),
            member("convoke://Main@[::1]:3311", 2),
            member("convoke://Main@10.0.0.1:25520", 3),
            member("convoke://convoke@127.0.0.1:25520", 4),
        ],
        ..CurrentClusterState::default()
    }
});

/// The fields the routes read.
const FIELDS: [&str; 2] = ["operation", "address"];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 5 {
        0 => address(rest),
        1 => form(Some("application/x-www-form-urlencoded"), rest),
        2 => form(None, rest),
        3 => form(Some("multipart/form-data; boundary=BOUNDARY"), rest),
        _ => {
            let Some(newline) = rest.iter().position(|&b| b == b'\n') else { return };
            let Ok(content_type) = std::str::from_utf8(&rest[..newline]) else { return };
            form(Some(content_type), &rest[newline + 1..]);
        }
    }
});

fn address(bytes: &[u8]) {
    let Ok(given) = std::str::from_utf8(bytes) else { return };
    let found = find_member(&STATE, given);
    if let Some(m) = found {
        let full = m.address().to_string();
        let given = given.trim_start_matches('/');
        assert!(
            full == given || full.strip_prefix("convoke://") == Some(given),
            "{given:?} found {full}"
        );
    }
    if let Ok(a) = given.parse::<Address>() {
        let text = a.to_string();
        assert_eq!(text.parse::<Address>().as_ref(), Ok(&a), "{given:?} printed as {text:?}");
        if let Some(m) = STATE.members.iter().find(|m| *m.address() == a) {
            let found = find_member(&STATE, &text).map(Member::node);
            assert_eq!(found, Some(m.node()), "{text:?} is not found");
        }
    }
}

fn form(content_type: Option<&str>, body: &[u8]) {
    let mut request = Request::builder().method("PUT").uri("/cluster/members/x");
    if let Some(ct) = content_type {
        let Ok(value) = HeaderValue::from_str(ct) else { return };
        request = request.header(header::CONTENT_TYPE, value);
    }
    let Ok(request) = request.body(Body::from(body.to_vec())) else { return };
    let multipart = content_type
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"));
    let form = futures::executor::block_on(Form::from_request(request, &()));
    if multipart {
        if let Ok(form) = &form {
            for name in FIELDS {
                let _ = form.field(name).map(str::to_ascii_lowercase);
            }
        }
        return;
    }
    let pairs = serde_urlencoded::from_bytes::<Vec<(String, String)>>(body);
    match (&form, &pairs) {
        (Ok(form), Ok(pairs)) => {
            for name in FIELDS {
                let last = pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
                assert_eq!(form.field(name).ok(), last, "field {name:?}");
            }
        }
        (Err(_), Err(_)) => {}
        _ => panic!("form {form:?} but urlencoded pairs {pairs:?}"),
    }
}
