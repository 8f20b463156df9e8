//! Where keys live when a run has several servers (`--distribution modulo|ketama`), and which
//! keys each connection may use.
//!
//! ```text
//! keyspace ─ distribution ─▶ server s's keys ─ split by connection ─▶ KeySet per connection
//!   modulo: key index i on server i % S
//!   ketama: key bytes on the continuum of libmemcached's consistent ketama (as pylibmc's
//!           behaviors={"ketama": True} sets it up)
//! ```
//!
//! **ketama.** libmemcached 1.0's `MEMCACHED_BEHAVIOR_KETAMA` (what pylibmc's `"ketama": True`
//! turns on, with the default `hash`) selects `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA`
//! without weights: each server gets 100 points on a 32-bit circle, point `i` (0 to 99) at
//! the Jenkins one-at-a-time hash of `"host:port-i"`, or of `"host-i"` when the port is 11211
//! (the server's name as given, not its resolved address). A key goes to the first point at or
//! above the one-at-a-time hash of its bytes, wrapping to the lowest point. The test
//! `tests/ketama.rs` checks 10,000 keys over 3 memcached servers against pylibmc.
//!
//! twemproxy's `distribution: ketama` differs: 160 points per server (fewer or more by
//! weight), four per MD5 digest of `"name-i"` (name as above, or the server's alias), and the
//! key hashed with the pool's `hash:` (fnv1a_64 by default). That is libmemcached's
//! `ketama_weighted`, not its `ketama`; this generator does not place keys that way.
//!
//! **Load.** A connection talks to one server (connection `c` to server `c % S`) and picks
//! only keys that server holds, so each server gets the load of its connections: the key
//! popularity is applied within each server's keys, and a server holding more keys under
//! ketama does not get more requests.

use std::sync::Arc;

/// How keys are spread over several servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Key index `i` lives on server `i % servers`.
    Modulo,
    /// libmemcached's consistent ketama (pylibmc `behaviors={"ketama": True}`).
    Ketama,
}

impl Distribution {
    /// The CLI spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Distribution::Modulo => "modulo",
            Distribution::Ketama => "ketama",
        }
    }
}

/// Points per server on libmemcached's unweighted ketama continuum.
pub const KETAMA_POINTS: u32 = 100;
/// The port libmemcached leaves out of a server's name on the continuum.
pub const DEFAULT_PORT: u16 = 11211;

/// Jenkins one-at-a-time hash (libmemcached's `MEMCACHED_HASH_DEFAULT`).
pub fn one_at_a_time(bytes: &[u8]) -> u32 {
    let mut v: u32 = 0;
    for &b in bytes {
        v = v.wrapping_add(u32::from(b));
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
    }
    v = v.wrapping_add(v << 3);
    v ^= v >> 11;
    v.wrapping_add(v << 15)
}

/// The consistent-hashing circle: points sorted by hash, each naming a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuum {
    points: Vec<(u32, u32)>,
}

impl Continuum {
    /// libmemcached's unweighted ketama continuum over `servers` given as `host:port` (or
    /// `host`, which means port 11211).
    pub fn ketama<S: AsRef<str>>(servers: &[S]) -> Continuum {
        let mut points = Vec::with_capacity(servers.len() * KETAMA_POINTS as usize);
        for (index, server) in servers.iter().enumerate() {
            let name = continuum_name(server.as_ref());
            for i in 0..KETAMA_POINTS {
                let label = format!("{name}-{i}");
                points.push((one_at_a_time(label.as_bytes()), index as u32));
            }
        }
        points.sort_by_key(|p| p.0);
        Continuum { points }
    }

    /// The server index `key` lives on.
    ///
    /// # Panics
    /// If the continuum has no points (no servers).
    pub fn server_of(&self, key: &[u8]) -> usize {
        let h = one_at_a_time(key);
        let i = self.points.partition_point(|p| p.0 < h);
        let i = if i == self.points.len() { 0 } else { i };
        self.points[i].1 as usize
    }
}

/// A server's name as libmemcached puts it on the continuum: `host` at port 11211, else
/// `host:port`. An IPv6 address keeps its brackets off, as libmemcached stores the bare host.
pub fn continuum_name(server: &str) -> String {
    let (host, port) = match server.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.parse::<u16>().is_ok() => {
            (h, p.parse::<u16>().unwrap_or(DEFAULT_PORT))
        }
        _ => (server, DEFAULT_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if port == DEFAULT_PORT {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// The keys one connection may use, in ascending order: an arithmetic progression of key
/// indices, or every `step`-th entry of a server's sorted key list (ketama).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySet {
    /// Keys `first, first + step, ...` below `keys`.
    Stride {
        /// The smallest key.
        first: u64,
        /// Distance between keys.
        step: u64,
        /// Size of the whole keyspace.
        keys: u64,
    },
    /// Keys `list[first], list[first + step], ...`.
    List {
        /// One server's keys, ascending.
        list: Arc<[u64]>,
        /// The first position taken.
        first: u64,
        /// Distance between positions.
        step: u64,
    },
}

impl KeySet {
    /// Every key of a keyspace of `keys`.
    pub fn all(keys: u64) -> KeySet {
        KeySet::Stride {
            first: 0,
            step: 1,
            keys,
        }
    }

    /// Number of keys in the set.
    pub fn len(&self) -> u64 {
        match self {
            KeySet::Stride { first, step, keys } => keys.saturating_sub(*first).div_ceil(*step),
            KeySet::List { list, first, step } => {
                (list.len() as u64).saturating_sub(*first).div_ceil(*step)
            }
        }
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `n`-th key of the set (`n < len()`).
    #[inline]
    pub fn nth(&self, n: u64) -> u64 {
        match self {
            KeySet::Stride { first, step, .. } => first + n * step,
            KeySet::List { list, first, step } => list[(first + n * step) as usize],
        }
    }

    /// The position of `key` in the set, if it is there.
    pub fn position(&self, key: u64) -> Option<u64> {
        match self {
            KeySet::Stride { first, step, keys } => {
                (key >= *first && key < *keys && (key - first).is_multiple_of(*step))
                    .then(|| (key - first) / step)
            }
            KeySet::List { list, first, step } => {
                let at = list.binary_search(&key).ok()? as u64;
                (at >= *first && (at - first).is_multiple_of(*step)).then(|| (at - first) / step)
            }
        }
    }

    /// Maps `rank`, drawn over the whole keyspace of `keys` (rank 0 the most popular), to a
    /// key of this set at the same relative place, so a popularity shape over ranks is kept
    /// within the set.
    #[inline]
    pub fn place(&self, rank: u64, keys: u64) -> u64 {
        match self {
            KeySet::Stride { first, step, .. } => {
                // Stay in the same block of `step` ranks.
                let placed = rank - rank % step + first;
                if placed >= keys {
                    placed - step
                } else {
                    placed
                }
            }
            KeySet::List { .. } => {
                let len = self.len();
                let n = (u128::from(rank) * u128::from(len) / u128::from(keys.max(1))) as u64;
                self.nth(n.min(len - 1))
            }
        }
    }
}

/// Which keys each connection uses: `pick` (what it draws requests from) and `own` (the keys
/// it alone writes during prefill and, under `--verify`, ever), for every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Per connection, the keys it may pick.
    pub pick: Vec<KeySet>,
    /// Per connection, the keys it owns; every key is owned by exactly one connection.
    pub own: Vec<KeySet>,
}

/// Why keys cannot be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementError {
    /// A connection would own no key (fewer keys on its server than connections to it).
    EmptyConnection {
        /// The server with too few keys.
        server: usize,
    },
}

impl std::fmt::Display for PlacementError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlacementError::EmptyConnection { server } => write!(
                f,
                "server {server} holds fewer keys than it has connections: use more --keys"
            ),
        }
    }
}

impl std::error::Error for PlacementError {}

/// Places `keys` keys (`key(i)` gives the bytes of key `i`) over `servers` (names as given)
/// and `connections` connections (a multiple of the number of servers; connection `c` talks to
/// server `c % servers`). With `verify`, connections pick only the keys they own.
///
/// # Errors
/// [`PlacementError`] when a connection would own no key.
pub fn place<'k, S: AsRef<str>>(
    distribution: Distribution,
    servers: &[S],
    connections: usize,
    keys: u64,
    key: impl Fn(u64) -> &'k [u8],
    verify: bool,
) -> Result<Placement, PlacementError> {
    let s = servers.len().max(1) as u64;
    let c = connections as u64;
    let (pick, own): (Vec<KeySet>, Vec<KeySet>) = if s == 1 || distribution == Distribution::Modulo
    {
        (0..c)
            .map(|i| {
                let own = KeySet::Stride {
                    first: i,
                    step: c,
                    keys,
                };
                let pick = if verify {
                    own.clone()
                } else {
                    KeySet::Stride {
                        first: i % s,
                        step: s,
                        keys,
                    }
                };
                (pick, own)
            })
            .unzip()
    } else {
        let continuum = Continuum::ketama(servers);
        let mut lists: Vec<Vec<u64>> = vec![Vec::new(); s as usize];
        for k in 0..keys {
            lists[continuum.server_of(key(k))].push(k);
        }
        let lists: Vec<Arc<[u64]>> = lists.into_iter().map(Arc::from).collect();
        let per_server = c / s;
        (0..c)
            .map(|i| {
                let list = lists[(i % s) as usize].clone();
                let own = KeySet::List {
                    list: list.clone(),
                    first: i / s,
                    step: per_server,
                };
                let pick = if verify {
                    own.clone()
                } else {
                    KeySet::List {
                        list,
                        first: 0,
                        step: 1,
                    }
                };
                (pick, own)
            })
            .unzip()
    };
    for (i, o) in own.iter().enumerate() {
        if o.is_empty() || pick[i].is_empty() {
            return Err(PlacementError::EmptyConnection {
                server: i % s as usize,
            });
        }
    }
    Ok(Placement { pick, own })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_at_a_time_matches_jenkins() {
        // Reference values of Bob Jenkins' one-at-a-time hash.
        assert_eq!(one_at_a_time(b""), 0);
        assert_eq!(one_at_a_time(b"a"), 0xca2e_9442);
        assert_eq!(
            one_at_a_time(b"The quick brown fox jumps over the lazy dog"),
            0x519e_91f5
        );
    }

    #[test]
    fn names_drop_the_default_port() {
        assert_eq!(continuum_name("10.0.0.1:11211"), "10.0.0.1");
        assert_eq!(continuum_name("10.0.0.1:11212"), "10.0.0.1:11212");
        assert_eq!(continuum_name("cache-a"), "cache-a");
        assert_eq!(continuum_name("[::1]:11300"), "::1:11300");
    }

    #[test]
    fn continuum_has_100_points_per_server_and_wraps() {
        let c = Continuum::ketama(&["a:1", "b:2", "c:3"]);
        assert_eq!(c.points.len(), 300);
        assert!(c.points.windows(2).all(|w| w[0].0 <= w[1].0));
        for s in 0..3 {
            assert_eq!(c.points.iter().filter(|p| p.1 == s).count(), 100);
        }
        // Every key lands somewhere, and roughly a third on each server.
        let mut n = [0u32; 3];
        for k in 0..30_000u32 {
            n[c.server_of(format!("key{k}").as_bytes())] += 1;
        }
        assert!(n.iter().all(|&x| (5_000..15_000).contains(&x)), "{n:?}");
    }

    #[test]
    fn key_sets_count_index_and_find() {
        let s = KeySet::Stride {
            first: 2,
            step: 3,
            keys: 10,
        };
        assert_eq!(s.len(), 3); // 2, 5, 8
        assert_eq!((s.nth(0), s.nth(2)), (2, 8));
        assert_eq!(
            (s.position(5), s.position(6), s.position(11)),
            (Some(1), None, None)
        );
        let l = KeySet::List {
            list: Arc::from(vec![1u64, 4, 6, 9, 12]),
            first: 1,
            step: 2,
        };
        assert_eq!(l.len(), 2); // 4, 9
        assert_eq!((l.nth(0), l.nth(1)), (4, 9));
        assert_eq!(
            (l.position(9), l.position(6), l.position(5)),
            (Some(1), None, None)
        );
        // Places keep the order of ranks.
        let all = KeySet::List {
            list: Arc::from((0..100u64).filter(|k| k % 7 == 0).collect::<Vec<_>>()),
            first: 0,
            step: 1,
        };
        let placed: Vec<u64> = (0..100).map(|r| all.place(r, 100)).collect();
        assert!(placed.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!((placed[0], placed[99]), (0, 98));
    }

    fn keys(n: u64) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("k{i:07}").into_bytes()).collect()
    }

    #[test]
    fn every_key_is_owned_once_and_lives_on_its_connections_server() {
        let names = ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"];
        let ks = keys(5_000);
        let continuum = Continuum::ketama(&names);
        for dist in [Distribution::Modulo, Distribution::Ketama] {
            for verify in [false, true] {
                let p = place(dist, &names, 6, 5_000, |k| &ks[k as usize], verify).unwrap();
                let mut owners = vec![0u32; 5_000];
                for (c, own) in p.own.iter().enumerate() {
                    for n in 0..own.len() {
                        let k = own.nth(n);
                        owners[k as usize] += 1;
                        assert_eq!(own.position(k), Some(n));
                        let server = match dist {
                            Distribution::Modulo => (k % 3) as usize,
                            Distribution::Ketama => continuum.server_of(&ks[k as usize]),
                        };
                        assert_eq!(server, c % 3, "{dist:?} key {k} conn {c}");
                    }
                    let pick = &p.pick[c];
                    for r in [0, 1, 2_500, 4_999] {
                        let k = pick.place(r, 5_000);
                        assert!(pick.position(k).is_some());
                        if verify {
                            assert!(own.position(k).is_some());
                        }
                    }
                }
                assert!(owners.iter().all(|&n| n == 1), "{dist:?} verify {verify}");
            }
        }
    }
}
