//! What the store keeps under a key: the versions of its values, each plain bytes, a CRDT or a
//! tombstone; and what a read makes of them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::crdt::Crdt;
use crate::fenced::{FenceRefusal, Fenced};
use crate::version::{VersionVector, Versions};

/// A key: UTF-8, non-empty, at most [`DataConfig::max_key_bytes`](crate::DataConfig) long.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key(String);

impl Key {
    /// Below every key, for ranges of (hash, key).
    pub(crate) const MIN: Key = Key(String::new());

    /// The key `name`, checked against the longest key allowed.
    pub fn new(name: impl Into<String>, max_bytes: usize) -> Result<Self, Refused> {
        let name = name.into();
        if name.is_empty() {
            return Err(Refused::EmptyKey);
        }
        if name.len() > max_bytes {
            return Err(Refused::KeyTooLong { bytes: name.len(), max: max_bytes });
        }
        Ok(Self(name))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its bytes, as the ring places them.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One value of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    /// Opaque bytes: concurrent writes stay siblings until a reader resolves them.
    Bytes(Vec<u8>),
    /// A CRDT: concurrent writes merge by themselves.
    Crdt(Crdt),
    /// A delete: no value, but a version that supersedes what the delete saw.
    Tombstone,
    /// A fenced value: one writer at a time, a superseded writer's writes refused (written only
    /// by [`Request::FencedWrite`](crate::Request::FencedWrite)).
    Fenced(Fenced),
}

impl Value {
    /// Its size as the limits count it: the bytes, or a CRDT's encoded size.
    pub fn size(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::Crdt(c) => postcard_size(c),
            Self::Tombstone => 0,
            Self::Fenced(f) => postcard_size(f),
        }
    }
}

fn postcard_size<T: Serialize>(v: &T) -> usize {
    postcard::to_stdvec(v).map_or(usize::MAX, |b| b.len())
}

/// Everything a replica holds for a key.
pub type Object = Versions<Value>;

/// What a read returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The current values: none when the key is absent or deleted, one, or siblings written
    /// concurrently. CRDT siblings of one kind come merged, as one value.
    pub values: Vec<Value>,
    /// The context to pass back with the next write, which then supersedes all of `values`.
    pub context: VersionVector,
}

impl Read {
    /// The read of `object`: tombstones dropped, CRDTs of one kind merged, fenced values
    /// merged.
    pub fn of(object: &Object) -> Self {
        let mut values: Vec<Value> = Vec::new();
        for (_, v) in object.values() {
            match v {
                Value::Tombstone => {}
                Value::Crdt(c) => {
                    let same = values.iter_mut().find_map(|x| match x {
                        Value::Crdt(m) if m.kind() == c.kind() => Some(m),
                        _ => None,
                    });
                    match same {
                        Some(m) => {
                            let _ = m.merge(c);
                        }
                        None => values.push(v.clone()),
                    }
                }
                Value::Fenced(f) => {
                    let same = values.iter_mut().find_map(|x| match x {
                        Value::Fenced(m) => Some(m),
                        _ => None,
                    });
                    match same {
                        Some(m) => m.merge(f),
                        None => values.push(v.clone()),
                    }
                }
                Value::Bytes(_) => {
                    if !values.contains(v) {
                        values.push(v.clone());
                    }
                }
            }
        }
        Self { values, context: object.context() }
    }

    /// The fenced value read, if the key holds one (fenced siblings come merged).
    pub fn fenced(&self) -> Option<&Fenced> {
        self.values.iter().find_map(|v| match v {
            Value::Fenced(f) => Some(f),
            _ => None,
        })
    }

    /// Whether the key is absent or deleted.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Why a request was refused before anything was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The key is empty.
    #[error("the key is empty")]
    EmptyKey,
    /// The key is too long.
    #[error("the key is {bytes} bytes long; at most {max} are allowed (data.max_key_bytes)")]
    KeyTooLong {
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The value is too large.
    #[error("the value is {bytes} bytes; at most {max} are allowed (data.max_value_bytes)")]
    ValueTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The write would leave more siblings than allowed.
    #[error(
        "the key would hold {siblings} concurrent values; at most {max} are allowed \
         (data.max_siblings): read it and write with the context of the read to resolve them"
    )]
    TooManySiblings {
        /// How many it would hold.
        siblings: usize,
        /// The limit.
        max: usize,
    },
    /// The update's CRDT kind differs from the value's.
    #[error("{0}")]
    Kind(String),
    /// A level asks for more replicas than there are.
    #[error(
        "level {level} needs {needed} replicas, but the store keeps {replicas} (data.replicas)"
    )]
    Level {
        /// The level asked for.
        level: String,
        /// What it needs.
        needed: usize,
        /// What the store has.
        replicas: usize,
    },
    /// A fenced operation of a superseded writer.
    #[error(transparent)]
    Fenced(#[from] FenceRefusal),
}
