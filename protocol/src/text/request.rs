//! Text-protocol requests: one command line, parsed in place (protocol.txt, "Commands").

use super::error::Rejected;
use super::line::{Line, Tokens, is_valid_key, parse_i32, parse_u32, parse_u64};
use super::{ErrorReply, ParseError};
use crate::meta;

/// Most tokens memcached looks at on one line (`MAX_TOKENS` less its terminal token); `get`
/// keys beyond it are read from the rest of the line.
const MAX_TOKENS: usize = 23;

/// A text-protocol request line, borrowing its key(s) from the receive buffer.
///
/// Storage commands carry the length of their data block; the block itself follows the line
/// and is taken with [`data_block`](super::data_block) once it has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`/`gets`/`gat`/`gats <keys>*`.
    Get(Get<'a>),
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`.
    Store(Store<'a>),
    /// `delete <key> [0] [noreply]`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// No reply wanted.
        noreply: bool,
    },
    /// `incr`/`decr <key> <value> [noreply]`.
    Arithmetic {
        /// Increment or decrement.
        command: ArithmeticCommand,
        /// The key.
        key: &'a [u8],
        /// The amount, a 64-bit unsigned decimal.
        delta: u64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiration time, as the client sent it.
        exptime: i64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        /// Seconds (or a unix time) until the flush takes effect; 0 is now.
        delay: i64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `version`.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity {
        /// The requested level.
        level: u32,
        /// No reply wanted.
        noreply: bool,
    },
    /// `stats [group]`.
    Stats(StatsGroup),
    /// `slabs reassign <src> <dst>` or `slabs automove <level>|ratio <r>`.
    Slabs(SlabsCommand),
    /// `lru_crawler metadump <classes>|all|hash`: one line per item, then `END`.
    Metadump(Classes<'a>),
    /// The other `lru_crawler` commands: `crawl`, `tocrawl`, `sleep`, `enable`, `disable`.
    LruCrawler(CrawlerCommand<'a>),
    /// `cache_memlimit <megabytes> [noreply]`: a new memory budget (checked: 8 to
    /// 1,000,000,000).
    CacheMemlimit {
        /// The new budget in megabytes.
        megabytes: u32,
        /// No reply wanted.
        noreply: bool,
    },
    /// `watch [fetchers] [mutations] [evictions] [connevents]`: the connection becomes a log
    /// watcher (no argument: `fetchers`).
    Watch(WatchEvents),
    /// `shutdown [graceful]`: stop the server (when it allows it).
    Shutdown(ShutdownMode),
    /// `quit`: close the connection.
    Quit,
    /// A meta command (`mg`, `ms`, `md`, `ma`, `mn`, `me`).
    Meta(meta::Request<'a>),
}

/// A retrieval request (protocol.txt, "Retrieval command").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Get<'a> {
    /// Which retrieval command.
    pub command: GetCommand,
    /// The new expiration time for `gat`/`gats` (0 for `get`/`gets`).
    pub exptime: i64,
    /// The keys, each already checked with [`is_valid_key`](super::is_valid_key); possibly
    /// none for `gat <exptime>`, which memcached answers with a bare `END`.
    pub keys: Keys<'a>,
}

/// The retrieval commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetCommand {
    /// `get`: values.
    Get,
    /// `gets`: values with their CAS.
    Gets,
    /// `gat`: values, after updating their expiration time.
    Gat,
    /// `gats`: `gat` with CAS.
    Gats,
}

impl GetCommand {
    /// Whether `VALUE` lines carry the CAS.
    pub const fn returns_cas(self) -> bool {
        matches!(self, GetCommand::Gets | GetCommand::Gats)
    }

    /// Whether the command updates the expiration time (`gat`, `gats`).
    pub const fn touches(self) -> bool {
        matches!(self, GetCommand::Gat | GetCommand::Gats)
    }
}

/// The keys of a retrieval request, read from the line as they are iterated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    tokens: Tokens<'a>,
}

impl<'a> Keys<'a> {
    /// The keys in `text` (space-separated, as on a retrieval line after its command and
    /// exptime), trusted to be valid: for resuming a line whose keys [`Request::parse`] has
    /// already checked.
    pub const fn new_unchecked(text: &'a [u8]) -> Keys<'a> {
        Keys {
            tokens: Tokens::new(text),
        }
    }

    /// The part of the line not iterated yet (possibly starting with spaces); its length tells
    /// where in the line the next key starts.
    pub const fn remainder(&self) -> &'a [u8] {
        self.tokens.remainder()
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.tokens.next()
    }
}

/// A storage request line (protocol.txt, "Storage commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store<'a> {
    /// Which storage command.
    pub command: StoreCommand,
    /// The key.
    pub key: &'a [u8],
    /// The client's opaque flags (ignored by `append`/`prepend`).
    pub flags: u32,
    /// The expiration time as the client sent it (ignored by `append`/`prepend`).
    pub exptime: i64,
    /// Length of the data block that follows the line, `\r\n` not included.
    pub bytes: usize,
    /// The CAS to compare with (`cas` only; 0 otherwise).
    pub cas: u64,
    /// No reply wanted.
    pub noreply: bool,
}

/// The storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store if the key is not held.
    Add,
    /// Store if the key is held.
    Replace,
    /// Add the data after the held value.
    Append,
    /// Add the data before the held value.
    Prepend,
    /// Store if the item's CAS is still the one given.
    Cas,
}

/// `incr` or `decr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithmeticCommand {
    /// `incr`: add, wrapping at 2^64.
    Incr,
    /// `decr`: subtract, stopping at 0.
    Decr,
}

/// The `stats` groups memspin answers; any other group is answered `ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsGroup {
    /// `stats`: the general list.
    General,
    /// `stats settings`.
    Settings,
    /// `stats items`.
    Items,
    /// `stats slabs`.
    Slabs,
    /// `stats sizes`: items per 32-byte size class.
    Sizes,
    /// `stats sizes_enable`.
    SizesEnable,
    /// `stats sizes_disable`.
    SizesDisable,
    /// `stats conns`: every open connection.
    Conns,
    /// `stats reset`: counters start over.
    Reset,
    /// `stats detail on|off|dump`.
    Detail(Detail),
    /// `stats latency` (memspin's): time inside the server per command kind.
    Latency,
    /// `stats workers` (memspin's): each worker's loop and packet-path figures.
    Workers,
    /// `stats worker` (memspin's): the worker serving the connection and how many there are.
    Worker,
    /// `stats cachedump <class> <limit>`: up to `limit` items of slab class `class` (0: as
    /// many as fit memcached's 2 MiB reply).
    CacheDump {
        /// The slab class, below 64.
        class: u32,
        /// Items at most; 0 for no count limit.
        limit: u32,
    },
}

/// What `stats detail` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Start counting per key prefix.
    On,
    /// Stop counting.
    Off,
    /// The counts so far: `PREFIX <prefix> get <n> hit <n> set <n> del <n>` lines.
    Dump,
}

/// A `slabs` command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SlabsCommand {
    /// `slabs reassign <src> <dst>`: move a page between classes.
    Reassign {
        /// The class to take a page from.
        src: i32,
        /// The class to give it to.
        dst: i32,
    },
    /// `slabs automove <0|1|2> [noreply]`.
    Automove {
        /// The automover's level.
        level: u8,
        /// No reply wanted.
        noreply: bool,
    },
    /// `slabs automove ratio <ratio> [noreply]`.
    AutomoveRatio {
        /// The free-memory ratio the automover keeps.
        ratio: f64,
        /// No reply wanted.
        noreply: bool,
    },
}

// The ratio is always finite (the parser refuses NaN and infinities), so equality is total.
impl Eq for SlabsCommand {}

/// An `lru_crawler` command other than `metadump` (protocol.txt, "LRU_Crawler").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrawlerCommand<'a> {
    /// `lru_crawler crawl <classes>|all`: reclaim the expired items of these classes.
    Crawl(Classes<'a>),
    /// `lru_crawler tocrawl <n>`: look at most at `n` items per class in a crawl (0: all).
    ToCrawl(u32),
    /// `lru_crawler sleep <us>`: pause between the crawler's steps, 0 to 1,000,000 µs.
    Sleep(u32),
    /// `lru_crawler enable`.
    Enable,
    /// `lru_crawler disable`.
    Disable,
}

/// The classes `lru_crawler metadump` walks: `all`, `hash`, or a comma-separated list of
/// class numbers (kept as written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classes<'a> {
    /// `all`: every class.
    All,
    /// `hash`: the hash table, directly.
    Hash,
    /// `1,3,10`: these classes.
    List(&'a [u8]),
}

impl Classes<'_> {
    /// The class numbers of a [`Classes::List`] (`None` for a list with anything but numbers
    /// in it); empty for `all` and `hash`. As memcached reads the list: empty items between
    /// commas are skipped (`1,,2,`), and a number is taken modulo 2^32.
    pub fn numbers(&self) -> Option<impl Iterator<Item = u32> + '_> {
        let (list, valid): (&[u8], bool) = match self {
            Classes::List(list) => (list, class_items(list).all(|n| parse_u64(n).is_some())),
            _ => (b"", true),
        };
        valid.then(|| class_items(list).filter_map(parse_u32_wrapping))
    }
}

/// The non-empty items of a comma-separated class list.
fn class_items(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',').filter(|n| !n.is_empty())
}

/// An unsigned decimal below 2^64 taken modulo 2^32, as memcached's `safe_strtoul` stores it
/// in a `uint32_t` (`lru_crawler tocrawl 4294967297` sets 1).
fn parse_u32_wrapping(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|n| n as u32)
}

/// The events a `watch` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchEvents {
    /// Items looked up.
    pub fetchers: bool,
    /// Items stored (or refused).
    pub mutations: bool,
    /// Items evicted.
    pub evictions: bool,
    /// Connections opened and closed.
    pub connevents: bool,
}

/// How `shutdown` asks the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: as SIGINT.
    Now,
    /// `shutdown graceful`: as SIGUSR1.
    Graceful,
    /// Any other argument: answered `CLIENT_ERROR invalid shutdown mode` (when shutdown is
    /// allowed at all).
    Invalid,
}

impl<'a> Request<'a> {
    /// Parses the request line at the front of `buf` (see [`Line::parse`] for `scanned`).
    /// Returns the request and the line's length; a storage command's data block follows.
    ///
    /// # Errors
    ///
    /// [`ParseError::Incomplete`] before the newline, [`ParseError::Invalid`] for a line that
    /// is answered with an error, [`ParseError::Close`] for a line too long or an HTTP request.
    pub fn parse(buf: &'a [u8], scanned: usize) -> Result<(Request<'a>, usize), ParseError> {
        let line = Line::parse(buf, scanned)?;
        match Request::parse_line(line.text) {
            Ok(request) => Ok((request, line.len)),
            Err(Rejected::Reply {
                reply,
                noreply,
                swallow,
            }) => Err(ParseError::Invalid {
                reply,
                noreply,
                line_len: line.len,
                swallow,
            }),
            Err(Rejected::Close(close)) => Err(ParseError::Close(close)),
        }
    }

    /// Parses one line's text (without its newline), following memcached's
    /// `process_command_ascii`.
    fn parse_line(text: &'a [u8]) -> Result<Request<'a>, Rejected> {
        let mut all = Tokens::new(text);
        let mut tokens: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        for token in all.by_ref().take(MAX_TOKENS) {
            tokens[n] = token;
            n += 1;
        }
        let overflow = all.next().is_some();
        let t = &tokens[..n];
        let error = Rejected::reply(ErrorReply::Error);
        let Some(&command) = t.first() else {
            return Err(error);
        };
        if command.len() < 2 {
            return Err(error);
        }
        if command[0] == b'm' && command.len() == 2 {
            return meta::Request::parse_tokens(command[1], t, text, overflow).map(Request::Meta);
        }
        // Token counts below include the command, as memcached's WANT_TOKENS less one.
        let count = if overflow { MAX_TOKENS + 1 } else { n };
        let noreply = t.last() == Some(&&b"noreply"[..]);
        match command {
            b"get" | b"gets" | b"gat" | b"gats" => parse_get(command, text),
            b"set" | b"add" | b"replace" | b"append" | b"prepend" => {
                want(count, 5, 6)?;
                parse_store(command, t, noreply)
            }
            b"cas" => {
                want(count, 6, 7)?;
                parse_store(command, t, noreply)
            }
            b"delete" => {
                if !(2..=4).contains(&count) {
                    return Err(error);
                }
                if count > 2 {
                    let hold_is_zero = t[2] == b"0";
                    let valid = (count == 3 && (hold_is_zero || noreply))
                        || (count == 4 && hold_is_zero && noreply);
                    if !valid {
                        return Err(Rejected::unless_noreply(ErrorReply::DeleteUsage, noreply));
                    }
                }
                let key = key(t[1], noreply)?;
                Ok(Request::Delete { key, noreply })
            }
            b"incr" | b"decr" => {
                want(count, 3, 4)?;
                let key = key(t[1], noreply)?;
                let delta = parse_u64(t[2])
                    .ok_or(Rejected::unless_noreply(ErrorReply::InvalidDelta, noreply))?;
                let command = if command == b"incr" {
                    ArithmeticCommand::Incr
                } else {
                    ArithmeticCommand::Decr
                };
                Ok(Request::Arithmetic {
                    command,
                    key,
                    delta,
                    noreply,
                })
            }
            b"touch" => {
                want(count, 3, 4)?;
                let key = key(t[1], noreply)?;
                let exptime = parse_i32(t[2]).ok_or(Rejected::unless_noreply(
                    ErrorReply::InvalidExptime,
                    noreply,
                ))?;
                Ok(Request::Touch {
                    key,
                    exptime,
                    noreply,
                })
            }
            b"flush_all" => {
                if !(1..=3).contains(&count) {
                    return Err(error);
                }
                let delay = if count != if noreply { 2 } else { 1 } {
                    parse_i32(t[1]).ok_or(Rejected::unless_noreply(
                        ErrorReply::InvalidExptime,
                        noreply,
                    ))?
                } else {
                    0
                };
                Ok(Request::FlushAll { delay, noreply })
            }
            b"version" => Ok(Request::Version),
            b"quit" => Ok(Request::Quit),
            b"verbosity" => {
                want(count, 2, 3)?;
                let level = parse_u32(t[1])
                    .ok_or(Rejected::unless_noreply(ErrorReply::BadFormat, noreply))?;
                Ok(Request::Verbosity { level, noreply })
            }
            b"stats" => parse_stats(t).map(Request::Stats),
            b"slabs" => parse_slabs(t, count, noreply).map(Request::Slabs),
            b"shutdown" => Ok(Request::Shutdown(match (count, t.get(1).copied()) {
                (1, _) => ShutdownMode::Now,
                (2, Some(b"graceful")) => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            })),
            b"lru_crawler" => parse_lru_crawler(t, count),
            b"cache_memlimit" => {
                want(count, 2, 3)?;
                let megabytes = parse_u32_wrapping(t[1])
                    .ok_or(Rejected::unless_noreply(ErrorReply::Error, noreply))?;
                if megabytes < MIN_MEMLIMIT_MB {
                    return Err(Rejected::unless_noreply(
                        ErrorReply::MemlimitTooSmall,
                        noreply,
                    ));
                }
                if megabytes > MAX_MEMLIMIT_MB {
                    return Err(Rejected::unless_noreply(
                        ErrorReply::MemlimitNotMegabytes,
                        noreply,
                    ));
                }
                Ok(Request::CacheMemlimit { megabytes, noreply })
            }
            b"watch" => {
                // memcached reads every token but the last as an event when there are
                // several (`noreply` among them is refused).
                let mut events = WatchEvents::default();
                let args = if count > 1 { &t[1..count] } else { &[][..] };
                for &arg in args {
                    match arg {
                        b"fetchers" => events.fetchers = true,
                        b"mutations" => events.mutations = true,
                        b"evictions" => events.evictions = true,
                        b"connevents" => events.connevents = true,
                        _ => return Err(error),
                    }
                }
                if args.is_empty() {
                    events.fetchers = true;
                }
                Ok(Request::Watch(events))
            }
            // memcached's first-letter branches answer ERROR without looking further.
            _ if b"gsacidt".contains(&command[0]) => Err(error),
            _ if t.last().is_some_and(|last| last.starts_with(b"HTTP/")) => {
                Err(Rejected::Close(super::Close::Http))
            }
            _ => Err(error),
        }
    }
}

/// Slab classes memcached numbers (`MAX_NUMBER_OF_SLAB_CLASSES`): `stats cachedump` of a
/// class at or above it is refused.
pub const MAX_SLAB_CLASSES: u32 = 64;

/// The smallest budget `cache_memlimit` takes, in megabytes (memcached's).
pub const MIN_MEMLIMIT_MB: u32 = 8;

/// The largest `cache_memlimit`, in megabytes: memcached takes anything larger for bytes
/// given by mistake.
pub const MAX_MEMLIMIT_MB: u32 = 1_000_000_000;

/// The longest `lru_crawler sleep`, in microseconds (one second).
pub const MAX_CRAWLER_SLEEP_US: u32 = 1_000_000;

/// `lru_crawler <subcommand> ...`, answered as memcached's `process_lru_crawler_command`
/// answers it: `metadump`, `crawl`, `tocrawl` and `sleep` take exactly one argument,
/// `enable` and `disable` none; anything else is `ERROR`.
fn parse_lru_crawler<'a>(t: &[&'a [u8]], count: usize) -> Result<Request<'a>, Rejected> {
    let bad = Rejected::reply(ErrorReply::BadFormat);
    let classes = |token: &'a [u8]| match token {
        b"all" => Classes::All,
        b"hash" => Classes::Hash,
        list => Classes::List(list),
    };
    Ok(match (count, t.get(1).copied()) {
        (3, Some(b"metadump")) => Request::Metadump(classes(t[2])),
        (3, Some(b"crawl")) => Request::LruCrawler(CrawlerCommand::Crawl(classes(t[2]))),
        (3, Some(b"tocrawl")) => Request::LruCrawler(CrawlerCommand::ToCrawl(
            parse_u32_wrapping(t[2]).ok_or(bad)?,
        )),
        (3, Some(b"sleep")) => {
            let us = parse_u32_wrapping(t[2]).ok_or(bad)?;
            if us > MAX_CRAWLER_SLEEP_US {
                return Err(Rejected::reply(ErrorReply::CrawlerSleepTooLong));
            }
            Request::LruCrawler(CrawlerCommand::Sleep(us))
        }
        (2, Some(b"enable")) => Request::LruCrawler(CrawlerCommand::Enable),
        (2, Some(b"disable")) => Request::LruCrawler(CrawlerCommand::Disable),
        _ => return Err(Rejected::reply(ErrorReply::Error)),
    })
}

/// `stats <group>` (memcached's `process_stat`: `reset` and `detail` whatever follows them).
fn parse_stats(t: &[&[u8]]) -> Result<StatsGroup, Rejected> {
    Ok(match t.get(1).copied() {
        None => StatsGroup::General,
        Some(b"settings") => StatsGroup::Settings,
        Some(b"items") => StatsGroup::Items,
        Some(b"slabs") => StatsGroup::Slabs,
        Some(b"sizes") => StatsGroup::Sizes,
        Some(b"sizes_enable") => StatsGroup::SizesEnable,
        Some(b"sizes_disable") => StatsGroup::SizesDisable,
        Some(b"conns") => StatsGroup::Conns,
        Some(b"reset") => StatsGroup::Reset,
        Some(b"latency") => StatsGroup::Latency,
        Some(b"workers") => StatsGroup::Workers,
        Some(b"worker") => StatsGroup::Worker,
        Some(b"cachedump") => {
            let (Some(class), Some(limit)) = (t.get(2), t.get(3)) else {
                return Err(Rejected::reply(ErrorReply::BadCommandLine));
            };
            let bad = Rejected::reply(ErrorReply::BadFormat);
            let class = parse_u32(class).ok_or(bad)?;
            let limit = parse_u32(limit).ok_or(bad)?;
            if class >= MAX_SLAB_CLASSES {
                return Err(Rejected::reply(ErrorReply::IllegalSlabId));
            }
            StatsGroup::CacheDump { class, limit }
        }
        Some(b"detail") => StatsGroup::Detail(match t.get(2).copied() {
            Some(b"on") => Detail::On,
            Some(b"off") => Detail::Off,
            Some(b"dump") => Detail::Dump,
            _ => return Err(Rejected::reply(ErrorReply::DetailUsage)),
        }),
        Some(_) => return Err(Rejected::reply(ErrorReply::Error)),
    })
}

/// `slabs reassign <src> <dst>` (exactly), `slabs automove <level>` or `slabs automove ratio
/// <ratio>`, answered as memcached's `process_slabs_command` answers them.
fn parse_slabs(t: &[&[u8]], count: usize, noreply: bool) -> Result<SlabsCommand, Rejected> {
    let error = Rejected::reply(ErrorReply::Error);
    match t.get(1).copied() {
        Some(b"reassign") if count == 4 => {
            let bad = Rejected::reply(ErrorReply::BadFormat);
            let src = parse_i32(t[2]).ok_or(bad)?;
            let dst = parse_i32(t[3]).ok_or(bad)?;
            let (src, dst) = (
                i32::try_from(src).map_err(|_| bad)?,
                i32::try_from(dst).map_err(|_| bad)?,
            );
            Ok(SlabsCommand::Reassign { src, dst })
        }
        Some(b"automove") if count >= 3 => {
            if t[2] == b"ratio" {
                let ratio = t
                    .get(3)
                    .filter(|_| count >= 4)
                    .and_then(|r| core::str::from_utf8(r).ok())
                    .and_then(|r| r.parse::<f64>().ok())
                    .filter(|r| r.is_finite())
                    .ok_or(error)?;
                return Ok(SlabsCommand::AutomoveRatio { ratio, noreply });
            }
            let level =
                parse_u32(t[2]).ok_or(Rejected::unless_noreply(ErrorReply::BadFormat, noreply))?;
            if level > 2 {
                return Err(Rejected::unless_noreply(ErrorReply::Error, noreply));
            }
            Ok(SlabsCommand::Automove {
                level: level as u8,
                noreply,
            })
        }
        _ => Err(error),
    }
}

/// memcached's `WANT_TOKENS_OR`: exactly `a` or `b` tokens, else `ERROR`.
fn want(count: usize, a: usize, b: usize) -> Result<(), Rejected> {
    if count == a || count == b {
        Ok(())
    } else {
        Err(Rejected::reply(ErrorReply::Error))
    }
}

/// A key token, or `CLIENT_ERROR bad command line format`.
fn key(token: &[u8], noreply: bool) -> Result<&[u8], Rejected> {
    if is_valid_key(token) {
        Ok(token)
    } else {
        Err(Rejected::unless_noreply(ErrorReply::BadFormat, noreply))
    }
}

fn parse_get<'a>(command: &[u8], text: &'a [u8]) -> Result<Request<'a>, Rejected> {
    let command = match command {
        b"get" => GetCommand::Get,
        b"gets" => GetCommand::Gets,
        b"gat" => GetCommand::Gat,
        _ => GetCommand::Gats,
    };
    let mut tokens = Tokens::new(text);
    tokens.next();
    if tokens.clone().next().is_none() {
        return Err(Rejected::reply(ErrorReply::Error));
    }
    let mut exptime = 0;
    if command.touches() {
        let token = tokens.next().unwrap_or_default();
        exptime = parse_i32(token).ok_or(Rejected::reply(ErrorReply::InvalidExptime))?;
    }
    let keys = Keys { tokens };
    // memcached drops the hits already found and answers only the error when a later key is
    // bad; checking every key first gives the same reply without undoing anything.
    if !keys.clone().all(is_valid_key) {
        return Err(Rejected::reply(ErrorReply::BadFormat));
    }
    Ok(Request::Get(Get {
        command,
        exptime,
        keys,
    }))
}

fn parse_store<'a>(command: &[u8], t: &[&'a [u8]], noreply: bool) -> Result<Request<'a>, Rejected> {
    let command = match command {
        b"set" => StoreCommand::Set,
        b"add" => StoreCommand::Add,
        b"replace" => StoreCommand::Replace,
        b"append" => StoreCommand::Append,
        b"prepend" => StoreCommand::Prepend,
        _ => StoreCommand::Cas,
    };
    let bad = Rejected::unless_noreply(ErrorReply::BadFormat, noreply);
    let key = key(t[1], noreply)?;
    let flags = parse_u32(t[2]).ok_or(bad)?;
    let exptime = parse_i32(t[3]).ok_or(bad)?;
    let bytes = parse_i32(t[4]).ok_or(bad)?;
    let cas = if command == StoreCommand::Cas {
        parse_u64(t[5]).ok_or(bad)?
    } else {
        0
    };
    // memcached refuses a negative length, and one that leaves no room for the `\r\n`.
    if !(0..=i64::from(i32::MAX) - 2).contains(&bytes) {
        return Err(bad);
    }
    let bytes = usize::try_from(bytes).map_err(|_| bad)?;
    Ok(Request::Store(Store {
        command,
        key,
        flags,
        exptime,
        bytes,
        cas,
        noreply,
    }))
}
