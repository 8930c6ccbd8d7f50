//! redb against fjall under the replicated store's access pattern: objects kept by (hash of the
//! key, key), written in group commits of `--batch` (the writes a store's driver stages between
//! two syncs, 64 for 64 requests in flight) and synced to disk each time, read back at random,
//! scanned by hash range in pages, and measured on disk.
//!
//! Usage: cargo run --release -- [--keys N] [--batch B] [--value-bytes V] [--runs R]
//! Prints one line per engine and run, then the medians.

use std::path::Path;
use std::time::Instant;

trait Engine {
    fn name(&self) -> &'static str;
    /// Writes `batch` and makes it durable.
    fn put_batch(&mut self, batch: &[(Vec<u8>, Vec<u8>)]);
    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>>;
    /// Up to `limit` pairs with keys from `from` on; their count.
    fn scan(&mut self, from: &[u8], limit: usize) -> (usize, Option<Vec<u8>>);
}

struct Redb(redb::Database);

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("objects");

impl Engine for Redb {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn put_batch(&mut self, batch: &[(Vec<u8>, Vec<u8>)]) {
        let tx = self.0.begin_write().expect("write transaction");
        {
            let mut t = tx.open_table(TABLE).expect("table");
            for (k, v) in batch {
                t.insert(k.as_slice(), v.as_slice()).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.0.begin_read().expect("read transaction");
        let t = tx.open_table(TABLE).expect("table");
        t.get(key).expect("get").map(|v| v.value().to_vec())
    }

    fn scan(&mut self, from: &[u8], limit: usize) -> (usize, Option<Vec<u8>>) {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.0.begin_read().expect("read transaction");
        let t = tx.open_table(TABLE).expect("table");
        let mut last = None;
        let mut n = 0;
        for item in t.range(from..).expect("range").take(limit) {
            let (k, v) = item.expect("item");
            std::hint::black_box(v.value());
            last = Some(k.value().to_vec());
            n += 1;
        }
        (n, last)
    }
}

struct Fjall(fjall::Database, fjall::Keyspace);

impl Engine for Fjall {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn put_batch(&mut self, batch: &[(Vec<u8>, Vec<u8>)]) {
        let mut b = self.0.batch();
        for (k, v) in batch {
            b.insert(&self.1, k.as_slice(), v.as_slice());
        }
        b.commit().expect("commit");
        self.0.persist(fjall::PersistMode::SyncAll).expect("persist");
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.1.get(key).expect("get").map(|v| v.to_vec())
    }

    fn scan(&mut self, from: &[u8], limit: usize) -> (usize, Option<Vec<u8>>) {
        let mut last = None;
        let mut n = 0;
        for guard in self.1.range(from.to_vec()..).take(limit) {
            let (k, v) = guard.into_inner().expect("item");
            std::hint::black_box(&v);
            last = Some(k.to_vec());
            n += 1;
        }
        (n, last)
    }
}

/// Bytes allocated on disk under `dir` (blocks, not apparent sizes: a journal may be a sparse,
/// preallocated file).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let m = e.metadata().expect("metadata");
        total += if m.is_dir() { disk_bytes(&e.path()) } else { m.blocks() * 512 };
    }
    total
}

/// A key as the store keeps it: the key's 64-bit hash, big-endian, then the key.
fn stored_key(i: u64) -> Vec<u8> {
    let key = format!("key-{i}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut k = h.to_be_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    k
}

struct Figures {
    puts_per_s: f64,
    /// Read-modify-write of existing keys, synced per batch: what a replica does per write.
    updates_per_s: f64,
    gets_per_s: f64,
    scan_keys_per_s: f64,
    bytes_per_key: f64,
}

fn run(engine: &mut dyn Engine, dir: &Path, keys: u64, batch: usize, value_bytes: usize) -> Figures {
    let value = vec![0x5a_u8; value_bytes];
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..keys).map(|i| (stored_key(i), value.clone())).collect();
    let t = Instant::now();
    for chunk in pairs.chunks(batch) {
        engine.put_batch(chunk);
    }
    let puts_per_s = keys as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    for chunk in pairs.chunks(batch) {
        let updated: Vec<(Vec<u8>, Vec<u8>)> = chunk
            .iter()
            .map(|(k, _)| {
                let mut v = engine.get(k).expect("present");
                v[0] ^= 1;
                (k.clone(), v)
            })
            .collect();
        engine.put_batch(&updated);
    }
    let updates_per_s = keys as f64 / t.elapsed().as_secs_f64();

    // Random reads: a fixed permutation (multiplicative stride), the same for both engines.
    let t = Instant::now();
    let mut found = 0u64;
    for i in 0..keys {
        let j = i.wrapping_mul(2_654_435_761) % keys;
        found += u64::from(engine.get(&pairs[j as usize].0).is_some());
    }
    assert_eq!(found, keys, "{}: every key reads back", engine.name());
    let gets_per_s = keys as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut from = vec![0u8];
    let mut scanned = 0;
    loop {
        let (n, last) = engine.scan(&from, 1024);
        scanned += n;
        let Some(mut last) = last else { break };
        last.push(0);
        from = last;
        if n < 1024 {
            break;
        }
    }
    assert_eq!(scanned as u64, keys, "{}: the scan sees every key", engine.name());
    let scan_keys_per_s = keys as f64 / t.elapsed().as_secs_f64();
    Figures { puts_per_s, updates_per_s, gets_per_s, scan_keys_per_s, bytes_per_key: disk_bytes(dir) as f64 / keys as f64 }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let keys = arg("--keys", 100_000) as u64;
    let batch = arg("--batch", 64);
    let value_bytes = arg("--value-bytes", 200);
    let runs = arg("--runs", 3);
    println!("{keys} keys of {value_bytes} B, synced every {batch} writes, {runs} runs");
    let mut results: Vec<(&'static str, Vec<Figures>)> = vec![("redb", Vec::new()), ("fjall", Vec::new())];
    for r in 0..runs {
        for (name, figures) in &mut results {
            let dir = tempfile::tempdir_in(".").expect("temporary directory");
            let mut engine: Box<dyn Engine> = match *name {
                "redb" => Box::new(Redb(redb::Database::create(dir.path().join("db")).expect("redb"))),
                _ => {
                    let db = fjall::Database::builder(dir.path()).open().expect("fjall");
                    let ks = db.keyspace("objects", fjall::KeyspaceCreateOptions::default).expect("keyspace");
                    Box::new(Fjall(db, ks))
                }
            };
            let f = run(engine.as_mut(), dir.path(), keys, batch, value_bytes);
            println!(
                "run {r} {name:6} puts/s {:>9.0}  updates/s {:>9.0}  gets/s {:>9.0}  scan keys/s {:>10.0}  disk B/key {:>6.0}",
                f.puts_per_s, f.updates_per_s, f.gets_per_s, f.scan_keys_per_s, f.bytes_per_key
            );
            drop(engine);
            figures.push(f);
        }
    }
    println!("medians:");
    for (name, figures) in &results {
        let m = |f: fn(&Figures) -> f64| median(figures.iter().map(f).collect());
        println!(
            "{name:6} puts/s {:>9.0}  updates/s {:>9.0}  gets/s {:>9.0}  scan keys/s {:>10.0}  disk B/key {:>6.0}",
            m(|f| f.puts_per_s),
            m(|f| f.updates_per_s),
            m(|f| f.gets_per_s),
            m(|f| f.scan_keys_per_s),
            m(|f| f.bytes_per_key)
        );
    }
}
