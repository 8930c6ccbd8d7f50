//! Typed messaging between members: named endpoints, `ask` (request/response) and `tell`
//! (fire-and-forget), and member watch. Design notes: `docs/messaging.md`.
//!
//! Frames travel on the transport's application stream, a connection per peer of its own, so a
//! saturated endpoint never delays a heartbeat or a gossip. Payloads are encoded with postcard:
//! serde-compatible, compact (varint integers, no field names), with a documented, stable wire
//! format, and fast enough that encoding is not what limits an ask.
//!
//! Rules:
//! - Only members send and receive. An ask or tell to a node that is not a member of this
//!   node's view (or is Down) fails at once with [`AskError::NotAMember`]; a frame from a node
//!   that is not a member of the receiver's view is dropped and counted
//!   ([`MessagingStats::from_non_members`]).
//! - Every frame names the incarnation (uid) it is meant for; a restarted node at the same
//!   address refuses frames meant for its previous incarnation.
//! - Each endpoint has a bounded inbound queue. When it is full, an ask is answered at once with
//!   [`AskError::Overloaded`] and a tell is dropped; both are counted.
//! - A frame is at most `cluster.transport.max_frame_size` bytes: a larger request fails with
//!   [`AskError::TooLarge`] before anything is sent.
//! - An ask in flight fails at once with [`AskError::TargetRemoved`] when its target is downed
//!   or removed, without waiting for its timeout ([`Messaging::watch_member`]).
//! - Delivery is at most once: nothing is retried.

// Public only for the fuzz target in `fuzz/` (`fuzz/fuzz_targets/messaging.rs`); not part of the API.
#[doc(hidden)]
pub mod envelope;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use convoke_membership::{MemberStatus, UniqueAddress};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};

use crate::control::{Control, Snapshot};
use crate::transport::{ApplicationInbound, ApplicationSendError, Transport};
use envelope::{Body, Envelope, Failure};

/// The name and the request and response types of an endpoint. Both sides use the same key;
/// the types are checked at compile time on each side, and the name at run time.
pub struct EndpointKey<Req, Resp> {
    name: Cow<'static, str>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> EndpointKey<Req, Resp> {
    /// The key of endpoint `name` (1 to 255 bytes of UTF-8).
    pub const fn new(name: &'static str) -> Self {
        Self { name: Cow::Borrowed(name), _types: PhantomData }
    }

    /// A key with a name made at run time, e.g. one per singleton.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: Cow::Owned(name.into()), _types: PhantomData }
    }

    /// The endpoint's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> Result<(), AskError> {
        if (1..=255).contains(&self.name.len()) {
            Ok(())
        } else {
            Err(AskError::BadEndpointName { name: self.name.to_string() })
        }
    }
}

impl<Req, Resp> Clone for EndpointKey<Req, Resp> {
    fn clone(&self) -> Self {
        Self { name: self.name.clone(), _types: PhantomData }
    }
}

impl<Req, Resp> fmt::Debug for EndpointKey<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EndpointKey").field(&self.name).finish()
    }
}

/// Why an ask (or a tell) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// No reply within the timeout.
    #[error("no reply from {target} on endpoint '{endpoint}' within {timeout:?}")]
    Timeout {
        /// The target.
        target: UniqueAddress,
        /// The endpoint.
        endpoint: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The target is not a member of this node's view (never joined, removed, Down, or another
    /// incarnation), or this node is not a member itself.
    #[error("{target} is not a member of this node's cluster")]
    NotAMember {
        /// The target.
        target: UniqueAddress,
    },
    /// The target was downed or removed while the ask waited for its reply.
    #[error("{target} was {how} while the ask waited for its reply")]
    TargetRemoved {
        /// The target.
        target: UniqueAddress,
        /// Downed or removed.
        how: MemberGone,
    },
    /// The target has no endpoint of that name.
    #[error("{target} has no endpoint '{endpoint}'")]
    NoSuchEndpoint {
        /// The target.
        target: UniqueAddress,
        /// The endpoint.
        endpoint: String,
    },
    /// The target's endpoint queue is full, or this node's queue of frames to the target is.
    #[error("{target} is overloaded: {detail}")]
    Overloaded {
        /// The target.
        target: UniqueAddress,
        /// Which queue was full.
        detail: String,
    },
    /// The encoded request (or, on the target, the reply) is larger than a frame may be.
    #[error(
        "message of {bytes} bytes is larger than cluster.transport.max_frame_size ({limit} bytes)"
    )]
    TooLarge {
        /// The encoded size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The request could not be encoded.
    #[error("cannot encode the request: {0}")]
    Encode(String),
    /// The reply could not be decoded as the response type, or the target could not decode the
    /// request as the endpoint's request type (the two sides disagree on the types).
    #[error("cannot decode: {0}")]
    Decode(String),
    /// The target took the request but did not reply (its handler dropped it, or the reply
    /// could not be sent).
    #[error("{target} did not reply: {detail}")]
    NoReply {
        /// The target.
        target: UniqueAddress,
        /// What the target said.
        detail: String,
    },
    /// The endpoint name is empty or longer than 255 bytes.
    #[error("endpoint name '{name}' must be 1 to 255 bytes")]
    BadEndpointName {
        /// The name.
        name: String,
    },
    /// This node is shutting down.
    #[error("this node is shutting down")]
    Stopped,
}

/// How a watched member went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberGone {
    /// Marked Down.
    Downed,
    /// No longer in the membership (removed, or replaced by a new incarnation).
    Removed,
}

impl fmt::Display for MemberGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Downed => "downed",
            Self::Removed => "removed",
        })
    }
}

/// Counters of the messaging layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessagingStats {
    /// Frames dropped because their sender is not a member.
    pub from_non_members: u64,
    /// Frames refused because they were meant for another incarnation of this address.
    pub wrong_incarnation: u64,
    /// Frames that are not envelopes (the connection stays; the frame is dropped).
    pub malformed: u64,
    /// Asks and tells for an endpoint that is not registered.
    pub no_such_endpoint: u64,
    /// Asks and tells refused because their endpoint's queue was full.
    pub overloaded: u64,
    /// Requests the endpoint could not decode.
    pub undecodable: u64,
    /// Replies that arrived after their ask had ended (timed out or cancelled).
    pub late_replies: u64,
}

/// The messaging layer's counters, shared with the metrics (created before either).
#[derive(Clone, Debug, Default)]
pub struct MessagingCounters(Arc<Counters>);

impl MessagingCounters {
    /// A snapshot of the counters.
    pub fn snapshot(&self) -> MessagingStats {
        let c = &self.0;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MessagingStats {
            from_non_members: load(&c.from_non_members),
            wrong_incarnation: load(&c.wrong_incarnation),
            malformed: load(&c.malformed),
            no_such_endpoint: load(&c.no_such_endpoint),
            overloaded: load(&c.overloaded),
            undecodable: load(&c.undecodable),
            late_replies: load(&c.late_replies),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    from_non_members: AtomicU64,
    wrong_incarnation: AtomicU64,
    malformed: AtomicU64,
    no_such_endpoint: AtomicU64,
    overloaded: AtomicU64,
    undecodable: AtomicU64,
    late_replies: AtomicU64,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A request waiting in an endpoint's queue.
#[derive(Debug)]
struct Incoming {
    from: UniqueAddress,
    /// The correlation id of an ask; `None` for a tell.
    ask: Option<u64>,
    payload: Bytes,
}

/// What came back for an ask.
#[derive(Debug)]
enum Answer {
    Reply(Bytes),
    Failure(Failure, String),
}

/// The messaging layer of one node. Cheap to clone; get it from [`crate::Node::messaging`].
#[derive(Clone)]
pub struct Messaging {
    inner: Arc<Inner>,
}

struct Inner {
    self_node: UniqueAddress,
    transport: Transport,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    endpoints: Mutex<HashMap<String, mpsc::Sender<Incoming>>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    next_id: AtomicU64,
    counters: MessagingCounters,
    max_frame_size: usize,
}

impl fmt::Debug for Messaging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Messaging")
            .field("self_node", &self.inner.self_node)
            .finish_non_exhaustive()
    }
}

impl Messaging {
    /// Starts the messaging layer of a node: it takes the transport's application frames and
    /// routes them until the node terminates. `None` when the transport's frames were already
    /// taken.
    pub(crate) fn start(
        self_node: UniqueAddress,
        transport: Transport,
        control: &Control,
        max_frame_size: usize,
        counters: MessagingCounters,
    ) -> Option<Self> {
        let frames = transport.application_inbound()?;
        let messaging = Self {
            inner: Arc::new(Inner {
                self_node,
                transport,
                snapshots: control.watch(),
                endpoints: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                counters,
                max_frame_size,
            }),
        };
        let (router, control) = (messaging.clone(), control.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = router.route(frames) => {}
                _ = control.terminated() => {}
            }
            // Fail every ask still waiting, rather than letting each run into its timeout.
            router.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).clear();
        });
        Some(messaging)
    }

    /// This node's identity.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.inner.self_node
    }

    /// Registers endpoint `key` on this node with an inbound queue of `capacity` requests
    /// (at least 1). The endpoint is unregistered when the returned handle is dropped.
    ///
    /// # Errors
    /// The name is already registered, or is empty or too long.
    pub fn endpoint<Req, Resp>(
        &self,
        key: &EndpointKey<Req, Resp>,
        capacity: usize,
    ) -> Result<Endpoint<Req, Resp>, EndpointError> {
        key.check().map_err(|_| EndpointError::BadName(key.name().to_owned()))?;
        let mut endpoints = self.inner.endpoints.lock().unwrap_or_else(PoisonError::into_inner);
        if endpoints.get(key.name()).is_some_and(|tx| !tx.is_closed()) {
            return Err(EndpointError::AlreadyRegistered(key.name().to_owned()));
        }
        let (tx, rx) = mpsc::channel(capacity.max(1));
        endpoints.insert(key.name().to_owned(), tx);
        Ok(Endpoint { key: key.clone(), rx, messaging: self.clone() })
    }

    /// Registers endpoint `key` and answers each request with `handler`, one at a time, in a
    /// task of its own that runs as long as the node does.
    ///
    /// # Errors
    /// As [`Messaging::endpoint`].
    pub fn serve<Req, Resp, F, Fut>(
        &self,
        key: &EndpointKey<Req, Resp>,
        capacity: usize,
        mut handler: F,
    ) -> Result<(), EndpointError>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: FnMut(UniqueAddress, Req) -> Fut + Send + 'static,
        Fut: Future<Output = Resp> + Send,
    {
        let mut endpoint = self.endpoint(key, capacity)?;
        tokio::spawn(async move {
            while let Some(request) = endpoint.recv().await {
                let (from, message, replier) = request.into_parts();
                let response = handler(from, message).await;
                if let Some(replier) = replier {
                    replier.reply(&response);
                }
            }
        });
        Ok(())
    }

    /// Sends `message` to endpoint `key` on `target` and waits at most `timeout` for the reply.
    ///
    /// # Errors
    /// See [`AskError`]; it fails at once when the target is not a member, and as soon as the
    /// target is downed or removed while waiting.
    pub async fn ask<Req, Resp>(
        &self,
        target: &UniqueAddress,
        key: &EndpointKey<Req, Resp>,
        message: &Req,
        timeout: Duration,
    ) -> Result<Resp, AskError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        key.check()?;
        let gone = self.watch_member(target);
        if gone.status().is_some() {
            return Err(AskError::NotAMember { target: target.clone() });
        }
        let payload = encode(message)?;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let _pending = Pending::insert(&self.inner, id, tx);
        let body = Body::Ask { id, endpoint: key.name().to_owned(), payload };
        self.send(target, body)?;
        let answer = tokio::select! {
            biased;
            answer = rx => answer.map_err(|_| AskError::Stopped)?,
            how = gone.gone() => return Err(AskError::TargetRemoved { target: target.clone(), how }),
            () = tokio::time::sleep(timeout) => {
                return Err(AskError::Timeout {
                    target: target.clone(),
                    endpoint: key.name().to_owned(),
                    timeout,
                });
            }
        };
        match answer {
            Answer::Reply(payload) => {
                postcard::from_bytes(&payload).map_err(|e| AskError::Decode(e.to_string()))
            }
            Answer::Failure(failure, detail) => {
                Err(failure_error(target, key.name(), failure, detail))
            }
        }
    }

    /// Sends `message` to endpoint `key` on `target` without waiting for anything. At most once:
    /// a tell the target cannot take (no such endpoint, full queue) is dropped there and counted.
    ///
    /// # Errors
    /// The target is not a member, the message cannot be encoded or is too large, or this node's
    /// queue of frames to the target is full.
    pub fn tell<Req, Resp>(
        &self,
        target: &UniqueAddress,
        key: &EndpointKey<Req, Resp>,
        message: &Req,
    ) -> Result<(), AskError>
    where
        Req: Serialize,
    {
        key.check()?;
        if member_gone(&self.inner.snapshots.borrow(), target).is_some() {
            return Err(AskError::NotAMember { target: target.clone() });
        }
        let payload = encode(message)?;
        self.send(target, Body::Tell { endpoint: key.name().to_owned(), payload })
    }

    /// A watch on `node`: [`MemberWatch::gone`] resolves when it is downed or removed (at once
    /// if it already is, or was never a member).
    pub fn watch_member(&self, node: &UniqueAddress) -> MemberWatch {
        MemberWatch { node: node.clone(), snapshots: self.inner.snapshots.clone() }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> MessagingStats {
        self.inner.counters.snapshot()
    }

    fn send(&self, target: &UniqueAddress, body: Body) -> Result<(), AskError> {
        let frame = Envelope { to_uid: target.uid.get(), body }.encode();
        if *target == self.inner.self_node {
            if frame.len() > self.inner.max_frame_size {
                return Err(AskError::TooLarge {
                    bytes: frame.len(),
                    limit: self.inner.max_frame_size,
                });
            }
            self.handle(ApplicationInbound { from: target.clone(), payload: frame });
            return Ok(());
        }
        self.inner.transport.send_application(&target.address, frame).map_err(|e| match e {
            ApplicationSendError::TooLarge { bytes, limit } => AskError::TooLarge { bytes, limit },
            ApplicationSendError::QueueFull { capacity } => AskError::Overloaded {
                target: target.clone(),
                detail: format!("{capacity} frames already wait to be sent to it"),
            },
            _ => AskError::Stopped,
        })
    }

    /// Routes application frames until the transport's channel closes.
    async fn route(&self, mut frames: mpsc::Receiver<ApplicationInbound>) {
        while let Some(frame) = frames.recv().await {
            self.handle(frame);
        }
    }

    /// Handles one frame: checks the sender and the incarnation, then queues a request on its
    /// endpoint or completes an ask. Never waits.
    fn handle(&self, frame: ApplicationInbound) {
        let inner = &self.inner;
        let envelope = match Envelope::decode(&frame.payload) {
            Ok(e) => e,
            Err(e) => {
                inc(&inner.counters.0.malformed);
                tracing::debug!(from = %frame.from, reason = %e, "dropping a malformed application frame");
                return;
            }
        };
        if member_gone(&inner.snapshots.borrow(), &frame.from).is_some() {
            inc(&inner.counters.0.from_non_members);
            tracing::debug!(from = %frame.from, "dropping an application frame from a non-member");
            return;
        }
        if envelope.to_uid != inner.self_node.uid.get() {
            inc(&inner.counters.0.wrong_incarnation);
            if let Body::Ask { id, .. } = envelope.body {
                self.fail(
                    &frame.from,
                    id,
                    Failure::WrongIncarnation,
                    "the target restarted".into(),
                );
            }
            return;
        }
        let (ask, endpoint, payload) = match envelope.body {
            Body::Tell { endpoint, payload } => (None, endpoint, payload),
            Body::Ask { id, endpoint, payload } => (Some(id), endpoint, payload),
            Body::Reply { id, payload } => return self.answer(id, Answer::Reply(payload)),
            Body::Failure { id, failure, detail } => {
                return self.answer(id, Answer::Failure(failure, detail));
            }
        };
        let queue =
            inner.endpoints.lock().unwrap_or_else(PoisonError::into_inner).get(&endpoint).cloned();
        let Some(queue) = queue.filter(|q| !q.is_closed()) else {
            inc(&inner.counters.0.no_such_endpoint);
            if let Some(id) = ask {
                self.fail(&frame.from, id, Failure::NoSuchEndpoint, String::new());
            }
            return;
        };
        let from = frame.from.clone();
        match queue.try_send(Incoming { from: frame.from, ask, payload }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                inc(&inner.counters.0.overloaded);
                if let Some(id) = ask {
                    let detail = format!("the queue of endpoint '{endpoint}' is full");
                    self.fail(&from, id, Failure::Overloaded, detail);
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                inc(&inner.counters.0.no_such_endpoint);
                if let Some(id) = ask {
                    self.fail(&from, id, Failure::NoSuchEndpoint, String::new());
                }
            }
        }
    }

    fn answer(&self, id: u64, answer: Answer) {
        let waiter = self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(answer);
            }
            None => inc(&self.inner.counters.0.late_replies),
        }
    }

    fn fail(&self, to: &UniqueAddress, id: u64, failure: Failure, detail: String) {
        if let Err(e) = self.send(to, Body::Failure { id, failure, detail }) {
            tracing::debug!(to = %to, error = %e, "cannot send an ask's failure back");
        }
    }
}

/// Removes its ask from the pending table when the ask ends, however it ends (cancelled too).
struct Pending<'a> {
    inner: &'a Inner,
    id: u64,
}

impl<'a> Pending<'a> {
    fn insert(inner: &'a Inner, id: u64, tx: oneshot::Sender<Answer>) -> Self {
        inner.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        Self { inner, id }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

fn encode<T: Serialize>(message: &T) -> Result<Bytes, AskError> {
    postcard::to_stdvec(message).map(Bytes::from).map_err(|e| AskError::Encode(e.to_string()))
}

fn failure_error(
    target: &UniqueAddress,
    endpoint: &str,
    failure: Failure,
    detail: String,
) -> AskError {
    let target = target.clone();
    match failure {
        Failure::NoSuchEndpoint => {
            AskError::NoSuchEndpoint { target, endpoint: endpoint.to_owned() }
        }
        Failure::Overloaded => AskError::Overloaded { target, detail },
        Failure::BadRequest => {
            AskError::Decode(format!("{target} cannot decode the request: {detail}"))
        }
        Failure::WrongIncarnation => AskError::NotAMember { target },
        Failure::NoReply | Failure::ReplyFailed => AskError::NoReply { target, detail },
    }
}

/// How `node` (this incarnation) is gone from `snapshot`, if it is; `None` for a member that
/// may send and receive. A map lookup in the snapshot's gossip: it runs for every frame.
fn member_gone(snapshot: &Snapshot, node: &UniqueAddress) -> Option<MemberGone> {
    match snapshot.gossip.member(node).map(|m| m.status()) {
        None | Some(MemberStatus::Removed) => Some(MemberGone::Removed),
        Some(MemberStatus::Down) => Some(MemberGone::Downed),
        Some(_) => None,
    }
}

/// Why an endpoint could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Another endpoint of that name is registered on this node.
    #[error("endpoint '{0}' is already registered on this node")]
    AlreadyRegistered(String),
    /// The name is empty or longer than 255 bytes.
    #[error("endpoint name '{0}' must be 1 to 255 bytes")]
    BadName(String),
}

/// A registered endpoint: its requests, in arrival order. Dropping it unregisters the name.
pub struct Endpoint<Req, Resp> {
    key: EndpointKey<Req, Resp>,
    rx: mpsc::Receiver<Incoming>,
    messaging: Messaging,
}

impl<Req, Resp> fmt::Debug for Endpoint<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint").field("key", &self.key).finish_non_exhaustive()
    }
}

impl<Req: DeserializeOwned, Resp> Endpoint<Req, Resp> {
    /// The next request; `None` once the node has stopped. A request that does not decode as
    /// `Req` is answered with an error (when it is an ask), counted and skipped.
    pub async fn recv(&mut self) -> Option<Request<Req, Resp>> {
        loop {
            let incoming = self.rx.recv().await?;
            if let Some(request) = self.decode(incoming) {
                return Some(request);
            }
        }
    }

    /// The next request if one has arrived, without waiting; `None` when none is waiting or the
    /// node has stopped. A consumer woken by [`Endpoint::recv`] can take what arrived with it in
    /// one go instead of waking once per request.
    pub fn try_recv(&mut self) -> Option<Request<Req, Resp>> {
        loop {
            let incoming = self.rx.try_recv().ok()?;
            if let Some(request) = self.decode(incoming) {
                return Some(request);
            }
        }
    }

    /// `incoming` as a request of this endpoint, or `None` when it does not decode (answered,
    /// counted and logged here).
    fn decode(&self, incoming: Incoming) -> Option<Request<Req, Resp>> {
        let Incoming { from, ask, payload } = incoming;
        let replier = ask.map(|id| Replier {
            messaging: self.messaging.clone(),
            to: from.clone(),
            id,
            done: false,
            _type: PhantomData,
        });
        match postcard::from_bytes::<Req>(&payload) {
            Ok(message) => Some(Request { from, message, replier }),
            Err(e) => {
                inc(&self.messaging.inner.counters.0.undecodable);
                tracing::debug!(%from, endpoint = self.key.name(), error = %e, "cannot decode a request");
                if let Some(mut r) = replier {
                    r.finish(Failure::BadRequest, e.to_string());
                }
                None
            }
        }
    }
}

impl<Req, Resp> Drop for Endpoint<Req, Resp> {
    fn drop(&mut self) {
        self.rx.close();
        let mut endpoints =
            self.messaging.inner.endpoints.lock().unwrap_or_else(PoisonError::into_inner);
        if endpoints.get(self.key.name()).is_some_and(mpsc::Sender::is_closed) {
            endpoints.remove(self.key.name());
        }
    }
}

/// A request taken from an endpoint.
pub struct Request<Req, Resp> {
    /// The sender.
    pub from: UniqueAddress,
    /// The message.
    pub message: Req,
    replier: Option<Replier<Resp>>,
}

impl<Req: fmt::Debug, Resp> fmt::Debug for Request<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("from", &self.from)
            .field("message", &self.message)
            .field("ask", &self.replier.is_some())
            .finish()
    }
}

impl<Req, Resp: Serialize> Request<Req, Resp> {
    /// Whether the sender waits for a reply (an ask rather than a tell).
    pub fn is_ask(&self) -> bool {
        self.replier.is_some()
    }

    /// Replies (a no-op for a tell).
    pub fn reply(self, response: &Resp) {
        if let Some(r) = self.replier {
            r.reply(response);
        }
    }

    /// The sender, the message and, for an ask, what replies to it (so the reply can be sent
    /// from elsewhere). An ask whose replier is dropped unused is answered with
    /// [`AskError::NoReply`].
    pub fn into_parts(self) -> (UniqueAddress, Req, Option<Replier<Resp>>) {
        (self.from, self.message, self.replier)
    }
}

/// Sends the reply to one ask. Dropping it unused answers [`AskError::NoReply`].
pub struct Replier<Resp> {
    messaging: Messaging,
    to: UniqueAddress,
    id: u64,
    done: bool,
    _type: PhantomData<fn(Resp)>,
}

impl<Resp> fmt::Debug for Replier<Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replier").field("to", &self.to).field("id", &self.id).finish()
    }
}

impl<Resp: Serialize> Replier<Resp> {
    /// Sends `response`. A response that cannot be encoded or is too large is answered as a
    /// failure the asker sees as [`AskError::NoReply`], and logged here.
    pub fn reply(mut self, response: &Resp) {
        self.done = true;
        let sent = encode(response).and_then(|payload| {
            self.messaging.send(&self.to, Body::Reply { id: self.id, payload })
        });
        if let Err(e) = sent {
            tracing::warn!(to = %self.to, error = %e, "cannot send a reply");
            self.finish(Failure::ReplyFailed, e.to_string());
        }
    }
}

impl<Resp> Replier<Resp> {
    fn finish(&mut self, failure: Failure, detail: String) {
        self.done = true;
        self.messaging.fail(&self.to, self.id, failure, detail);
    }
}

impl<Resp> Drop for Replier<Resp> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(Failure::NoReply, "the handler dropped the request".into());
        }
    }
}

/// A watch on one member; see [`Messaging::watch_member`].
#[derive(Debug, Clone)]
pub struct MemberWatch {
    node: UniqueAddress,
    snapshots: watch::Receiver<Arc<Snapshot>>,
}

impl MemberWatch {
    /// How the member is gone now, if it is.
    pub fn status(&self) -> Option<MemberGone> {
        member_gone(&self.snapshots.borrow(), &self.node)
    }

    /// Resolves when the member is downed or removed. If this node stops first, it resolves
    /// with [`MemberGone::Removed`]: from here, every member is gone.
    pub async fn gone(mut self) -> MemberGone {
        loop {
            if let Some(how) = member_gone(&self.snapshots.borrow_and_update(), &self.node) {
                return how;
            }
            if self.snapshots.changed().await.is_err() {
                return MemberGone::Removed;
            }
        }
    }
}
