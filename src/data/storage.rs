//! The replicas on disk: the store machine's [`Storage`] over fjall (`docs/data.md`, "Storage
//! engine").
//!
//! Three keyspaces in one database under `data.dir`: `objects`, keyed by the key's ring hash
//! (8 bytes, big-endian) followed by the key, so that a range of the ring is one range of the
//! keyspace; `hints`, keyed by the replica's address, a zero byte, then the same; and `meta`,
//! whose `ring` holds the addresses on the ring as last seen, one per line, then those of each
//! ring still remembered, newest first, each after an empty line. Values of the first
//! two are the postcard encoding of the key's versions. Writes are visible at once and durable after
//! [`Storage::sync`], which syncs fjall's journal to disk.

use std::path::Path;

use convoke_data::ring::{Span, hash};
use convoke_data::{Key, Object, Storage};
use convoke_membership::Address;

/// What can go wrong on disk.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// fjall failed.
    #[error("storage engine: {0}")]
    Engine(#[from] fjall::Error),
    /// A stored object does not decode: the file was damaged or written by another format.
    #[error("a stored object under {key:?} does not decode: {source}")]
    Corrupt {
        /// The key, as far as it reads.
        key: String,
        /// Why.
        source: postcard::Error,
    },
    /// The ring's members as stored do not read as addresses.
    #[error("the stored ring holds {0:?}, which is not an address")]
    CorruptRing(String),
}

/// The replicas and hints of one node, in fjall.
pub(super) struct FjallStorage {
    dir: std::path::PathBuf,
    db: fjall::Database,
    objects: fjall::Keyspace,
    hints: fjall::Keyspace,
    meta: fjall::Keyspace,
    /// Keys in `objects`, counted at open and kept up to date by every put and remove.
    count: u64,
    /// Whether [`Storage::sync`] syncs the journal (`data.sync = "always"`), or leaves it to a
    /// timer (`"interval"`).
    sync_each: bool,
}

impl std::fmt::Debug for FjallStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStorage").field("sync_each", &self.sync_each).finish_non_exhaustive()
    }
}

/// The key of the rings' members in `meta`.
const RING: &str = "ring";

fn object_key(key: &Key) -> Vec<u8> {
    let mut k = hash(key.as_bytes()).to_be_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    k
}

fn hint_key(replica: &Address, key: &Key) -> Vec<u8> {
    let mut k = replica.to_string().into_bytes();
    k.push(0);
    k.extend(object_key(key));
    k
}

/// The key of a stored object key (hash, then key bytes).
fn key_of(stored: &[u8]) -> Option<Key> {
    let text = std::str::from_utf8(stored.get(8..)?).ok()?;
    Key::new(text, usize::MAX).ok()
}

fn decode(stored_key: &[u8], bytes: &[u8]) -> Result<Object, DiskError> {
    postcard::from_bytes(bytes).map_err(|source| DiskError::Corrupt {
        key: String::from_utf8_lossy(stored_key.get(8..).unwrap_or_default()).into_owned(),
        source,
    })
}

fn encode(object: &Object) -> Vec<u8> {
    // Versions are plain data: encoding into a vector does not fail.
    postcard::to_stdvec(object).unwrap_or_default()
}

impl FjallStorage {
    /// Opens (or creates) the store under `dir`; `sync_each`: see [`FjallStorage`].
    ///
    /// # Errors
    /// The directory cannot be created or opened, or holds something fjall cannot read.
    pub(super) fn open(dir: &Path, sync_each: bool) -> Result<Self, DiskError> {
        let db = fjall::Database::builder(dir).open()?;
        let objects = db.keyspace("objects", fjall::KeyspaceCreateOptions::default)?;
        let hints = db.keyspace("hints", fjall::KeyspaceCreateOptions::default)?;
        let meta = db.keyspace("meta", fjall::KeyspaceCreateOptions::default)?;
        let mut count = 0;
        for guard in objects.iter() {
            guard.key()?;
            count += 1;
        }
        Ok(Self { dir: dir.to_path_buf(), db, objects, hints, meta, count, sync_each })
    }

    /// Syncs the journal to disk, whatever the sync mode (the interval timer's call).
    ///
    /// # Errors
    /// The disk failed.
    pub(super) fn sync_now(&self) -> Result<(), DiskError> {
        Ok(self.db.persist(fjall::PersistMode::SyncAll)?)
    }

    /// How many keys the replicas hold, and the bytes allocated on disk (blocks, not file
    /// lengths: the journal is a sparse, preallocated file).
    pub(super) fn stats(&self) -> (u64, u64) {
        (self.count, allocated(&self.dir))
    }
}

fn allocated(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| Some((e.path(), e.metadata().ok()?)))
        .map(|(path, m)| if m.is_dir() { allocated(&path) } else { file_bytes(&m) })
        .sum()
}

#[cfg(unix)]
fn file_bytes(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(m) * 512
}

#[cfg(not(unix))]
fn file_bytes(m: &std::fs::Metadata) -> u64 {
    m.len()
}

impl Storage for FjallStorage {
    type Error = DiskError;

    fn get(&mut self, key: &Key) -> Result<Option<Object>, DiskError> {
        let k = object_key(key);
        self.objects.get(&k)?.map(|v| decode(&k, &v)).transpose()
    }

    fn put(&mut self, key: &Key, object: &Object) -> Result<(), DiskError> {
        let k = object_key(key);
        let new = !self.objects.contains_key(&k)?;
        self.objects.insert(k, encode(object))?;
        self.count += u64::from(new);
        Ok(())
    }

    fn scan(
        &mut self,
        span: Span,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<(Key, Object)>, DiskError> {
        let from = match after {
            // The first stored key above the cursor: the cursor with a zero byte appended.
            Some(k) => {
                let mut from = object_key(k);
                from.push(0);
                from
            }
            None => span.from.to_be_bytes().to_vec(),
        };
        let mut out = Vec::new();
        for guard in self.objects.range(from..) {
            if out.len() >= limit {
                break;
            }
            let (k, v) = guard.into_inner()?;
            let Some(h) = k.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else { continue };
            let h = u64::from_be_bytes(h);
            if h < span.from {
                continue;
            }
            if h > span.to {
                break;
            }
            if let Some(key) = key_of(&k) {
                out.push((key, decode(&k, &v)?));
            }
        }
        Ok(out)
    }

    fn remove(&mut self, key: &Key) -> Result<(), DiskError> {
        let k = object_key(key);
        if self.objects.contains_key(&k)? {
            self.objects.remove(k)?;
            self.count -= 1;
        }
        Ok(())
    }

    fn hint(&mut self, replica: &Address, key: &Key) -> Result<Option<Object>, DiskError> {
        let k = hint_key(replica, key);
        self.hints.get(&k)?.map(|v| decode(&k, &v)).transpose()
    }

    fn put_hint(&mut self, replica: &Address, key: &Key, object: &Object) -> Result<(), DiskError> {
        Ok(self.hints.insert(hint_key(replica, key), encode(object))?)
    }

    fn remove_hint(&mut self, replica: &Address, key: &Key) -> Result<(), DiskError> {
        Ok(self.hints.remove(hint_key(replica, key))?)
    }

    fn hints(&mut self) -> Result<Vec<(Address, Key)>, DiskError> {
        let mut out = Vec::new();
        for guard in self.hints.iter() {
            let k = guard.key()?;
            let Some(zero) = k.iter().position(|b| *b == 0) else { continue };
            let replica = std::str::from_utf8(&k[..zero]).ok().and_then(|a| a.parse().ok());
            if let (Some(replica), Some(key)) = (replica, key_of(&k[zero + 1..])) {
                out.push((replica, key));
            }
        }
        Ok(out)
    }

    fn rings(&mut self) -> Result<Vec<Vec<Address>>, DiskError> {
        let Some(stored) = self.meta.get(RING)? else { return Ok(Vec::new()) };
        let text = String::from_utf8_lossy(&stored);
        text.split("\n\n")
            .map(|ring| {
                ring.lines()
                    .map(|line| line.parse().map_err(|_| DiskError::CorruptRing(line.to_owned())))
                    .collect()
            })
            .collect()
    }

    fn put_rings(&mut self, rings: &[Vec<Address>]) -> Result<(), DiskError> {
        let text: Vec<String> = rings
            .iter()
            .map(|ring| ring.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))
            .collect();
        Ok(self.meta.insert(RING, text.join("\n\n"))?)
    }

    fn sync(&mut self) -> Result<(), DiskError> {
        if self.sync_each { self.sync_now() } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use convoke_data::version::{ActorId, VersionVector};

    use super::*;

    fn object(v: &str) -> Object {
        let mut o = Object::default();
        o.write(
            ActorId(1),
            &VersionVector::new(),
            convoke_data::Value::Bytes(v.as_bytes().to_vec()),
        );
        o
    }

    #[test]
    fn what_was_synced_is_there_after_the_storage_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20 {
            let mut s = FjallStorage::open(dir.path(), true).unwrap();
            assert_eq!(s.stats().0, round * 50, "keys at the start of round {round}");
            for i in 0..50 {
                let k = Key::new(format!("r{round}-k{i}"), 1024).unwrap();
                s.put(&k, &object("v")).unwrap();
            }
            s.sync().unwrap();
            drop(s);
        }
        let mut s = FjallStorage::open(dir.path(), true).unwrap();
        let k = Key::new("r7-k3", 1024).unwrap();
        assert_eq!(s.get(&k).unwrap(), Some(object("v")));
        let all = s.scan(Span::ALL, None, usize::MAX).unwrap();
        assert_eq!(all.len(), 1000);
    }

    #[test]
    fn the_rings_are_read_back_in_order_and_a_bad_address_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let address = |port| Address::new("convoke", "127.0.0.1", port).unwrap();
        let rings = vec![
            vec![address(1), address(2), address(3)],
            vec![address(1), address(2)],
            vec![address(4)],
        ];
        let mut s = FjallStorage::open(dir.path(), true).unwrap();
        assert!(s.rings().unwrap().is_empty());
        s.put_rings(&rings).unwrap();
        s.sync().unwrap();
        drop(s);
        let mut s = FjallStorage::open(dir.path(), true).unwrap();
        assert_eq!(s.rings().unwrap(), rings);
        // A ring stored before the remembered rings were kept reads as the current one.
        s.meta
            .insert(RING, "convoke://convoke@127.0.0.1:1\nconvoke://convoke@127.0.0.1:2")
            .unwrap();
        assert_eq!(s.rings().unwrap(), vec![vec![address(1), address(2)]]);
        s.meta.insert(RING, "convoke://convoke@127.0.0.1:1\n\nnot an address").unwrap();
        let e = s.rings().unwrap_err();
        assert!(e.to_string().contains("not an address"), "{e}");
    }
}
