//! Text-protocol parser tests: every command, every error, truncations, fragment sweeps and
//! pipelines.

use super::*;
use crate::meta;

/// What a reader does with one request, owned so it outlives the buffer it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// A request (its `Debug` text) and, for storage commands, its data block.
    Request(String, Vec<u8>),
    /// An error answered (unless noreply), and the bytes swallowed after the line.
    Error(ErrorReply, bool, usize),
    /// A storage command whose data block was not followed by `\r\n`.
    BadChunk,
    /// The connection is closed.
    Close(Close),
}

/// A reader's state between buffers: the newline-search hint and bytes still to swallow.
#[derive(Default)]
struct Reader {
    scanned: usize,
    skip: usize,
}

/// Reads requests off the front of `buf` the way a server does, until it needs more bytes.
/// Returns the events and the bytes consumed.
fn read(buf: &[u8], reader: &mut Reader) -> (Vec<Event>, usize) {
    let mut events = Vec::new();
    let mut pos = reader.skip.min(buf.len());
    reader.skip -= pos;
    let scanned = &mut reader.scanned;
    loop {
        if reader.skip > 0 {
            break;
        }
        let rest = &buf[pos..];
        if rest.is_empty() {
            break;
        }
        match Request::parse(rest, *scanned) {
            Ok((request, line_len)) => {
                *scanned = 0;
                let bytes = match request {
                    Request::Store(store) => Some(store.bytes),
                    Request::Meta(m) if m.command == meta::Command::Set => Some(m.datalen),
                    _ => None,
                };
                let Some(bytes) = bytes else {
                    events.push(Event::Request(format!("{request:?}"), Vec::new()));
                    pos += line_len;
                    continue;
                };
                match data_block(&rest[line_len..], bytes) {
                    Ok(data) => {
                        events.push(Event::Request(format!("{request:?}"), data.to_vec()));
                        pos += line_len + bytes + 2;
                    }
                    Err(DataError::Incomplete { needed }) => {
                        assert_eq!(needed, line_len + bytes + 2 - rest.len());
                        break;
                    }
                    Err(DataError::BadChunk) => {
                        events.push(Event::BadChunk);
                        pos += line_len + bytes + 2;
                    }
                }
            }
            Err(ParseError::Incomplete { needed, scanned: s }) => {
                assert!(needed >= 1);
                assert_eq!(s, rest.len());
                *scanned = s;
                break;
            }
            Err(ParseError::Invalid {
                reply,
                noreply,
                line_len,
                swallow,
            }) => {
                *scanned = 0;
                events.push(Event::Error(reply, noreply, swallow));
                pos += line_len;
                let now = swallow.min(buf.len() - pos);
                pos += now;
                reader.skip = swallow - now;
            }
            Err(ParseError::Close(close)) => {
                events.push(Event::Close(close));
                pos = buf.len();
                break;
            }
        }
    }
    (events, pos)
}

/// Feeds `stream` to a reader `chunk` bytes at a time, keeping unconsumed bytes.
fn feed(stream: &[u8], chunk: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let mut pending = Vec::new();
    let mut reader = Reader::default();
    for piece in stream.chunks(chunk) {
        pending.extend_from_slice(piece);
        let (mut got, consumed) = read(&pending, &mut reader);
        events.append(&mut got);
        pending.drain(..consumed);
    }
    assert!(
        pending.is_empty(),
        "left over: {:?}",
        String::from_utf8_lossy(&pending)
    );
    events
}

#[track_caller]
fn parse_ok(line: &str) -> Request<'_> {
    match Request::parse(line.as_bytes(), 0) {
        Ok((request, len)) => {
            assert_eq!(len, line.find('\n').unwrap() + 1);
            request
        }
        Err(e) => panic!("{line:?}: {e:?}"),
    }
}

#[track_caller]
fn parse_err(line: &str) -> (ErrorReply, bool) {
    match Request::parse(line.as_bytes(), 0) {
        Err(ParseError::Invalid {
            reply,
            noreply,
            line_len,
            swallow,
        }) => {
            assert_eq!(line_len, line.len(), "{line:?}");
            assert_eq!(swallow, 0, "{line:?}");
            (reply, noreply)
        }
        other => panic!("{line:?}: {other:?}"),
    }
}

fn keys(request: Request<'_>) -> Vec<&[u8]> {
    match request {
        Request::Get(get) => get.keys.collect(),
        other => panic!("not a get: {other:?}"),
    }
}

#[test]
fn get_family() {
    let Request::Get(get) = parse_ok("get hello\r\n") else {
        panic!()
    };
    assert_eq!(get.command, GetCommand::Get);
    assert_eq!(get.exptime, 0);
    assert!(!get.command.returns_cas() && !get.command.touches());
    assert_eq!(get.keys.collect::<Vec<_>>(), [b"hello"]);

    assert_eq!(
        keys(parse_ok("get a bb  ccc\r\n")),
        [&b"a"[..], b"bb", b"ccc"]
    );
    assert_eq!(keys(parse_ok("gets k1 k2\n")), [&b"k1"[..], b"k2"]);
    let Request::Get(gat) = parse_ok("gat 300 a b\r\n") else {
        panic!()
    };
    assert_eq!(gat.command, GetCommand::Gat);
    assert_eq!(gat.exptime, 300);
    assert!(gat.command.touches() && !gat.command.returns_cas());
    assert_eq!(gat.keys.collect::<Vec<_>>(), [&b"a"[..], b"b"]);
    let Request::Get(gats) = parse_ok("gats -1 k\r\n") else {
        panic!()
    };
    assert_eq!((gats.command, gats.exptime), (GetCommand::Gats, -1));
    assert!(gats.command.returns_cas());
    // memcached answers a bare END to a gat without keys.
    assert_eq!(keys(parse_ok("gat 10\r\n")), Vec::<&[u8]>::new());
    // Keys may be any non-control bytes, UTF-8 included.
    assert_eq!(keys(parse_ok("get ключ\r\n")), ["ключ".as_bytes()]);
    let long = format!("get {}\r\n", "k".repeat(250));
    assert_eq!(keys(parse_ok(&long))[0].len(), 250);
}

#[test]
fn storage_commands() {
    let cases = [
        ("set k 1 2 3\r\n", StoreCommand::Set, 1, 2, 3, 0, false),
        ("add k 0 0 0\r\n", StoreCommand::Add, 0, 0, 0, 0, false),
        (
            "replace k 4294967295 -1 10 noreply\r\n",
            StoreCommand::Replace,
            u32::MAX,
            -1,
            10,
            0,
            true,
        ),
        (
            "append k 0 0 5\r\n",
            StoreCommand::Append,
            0,
            0,
            5,
            0,
            false,
        ),
        (
            "prepend k 0 0 5\r\n",
            StoreCommand::Prepend,
            0,
            0,
            5,
            0,
            false,
        ),
        (
            "cas k 7 2592000 5 18446744073709551615\r\n",
            StoreCommand::Cas,
            7,
            2_592_000,
            5,
            u64::MAX,
            false,
        ),
        (
            "cas k 0 0 5 1 noreply\r\n",
            StoreCommand::Cas,
            0,
            0,
            5,
            1,
            true,
        ),
        // A 6th token that is not `noreply` is ignored, as memcached does.
        ("set k 0 0 5 junk\r\n", StoreCommand::Set, 0, 0, 5, 0, false),
        (
            "set k 0 0 2147483645\r\n",
            StoreCommand::Set,
            0,
            0,
            2147483645,
            0,
            false,
        ),
    ];
    for (line, command, flags, exptime, bytes, cas, noreply) in cases {
        let Request::Store(store) = parse_ok(line) else {
            panic!("{line}")
        };
        assert_eq!(
            store,
            Store {
                command,
                key: b"k",
                flags,
                exptime,
                bytes,
                cas,
                noreply
            },
            "{line}"
        );
    }
}

#[test]
fn other_commands() {
    use ArithmeticCommand::*;
    let k = &b"k"[..];
    let cases: &[(&str, Request<'_>)] = &[
        (
            "delete k\r\n",
            Request::Delete {
                key: k,
                noreply: false,
            },
        ),
        (
            "delete k 0\r\n",
            Request::Delete {
                key: k,
                noreply: false,
            },
        ),
        (
            "delete k noreply\r\n",
            Request::Delete {
                key: k,
                noreply: true,
            },
        ),
        (
            "delete k 0 noreply\r\n",
            Request::Delete {
                key: k,
                noreply: true,
            },
        ),
        (
            "incr k 1\r\n",
            Request::Arithmetic {
                command: Incr,
                key: k,
                delta: 1,
                noreply: false,
            },
        ),
        (
            "decr k 18446744073709551615 noreply\r\n",
            Request::Arithmetic {
                command: Decr,
                key: k,
                delta: u64::MAX,
                noreply: true,
            },
        ),
        (
            "touch k 10\r\n",
            Request::Touch {
                key: k,
                exptime: 10,
                noreply: false,
            },
        ),
        (
            "touch k -5 noreply\r\n",
            Request::Touch {
                key: k,
                exptime: -5,
                noreply: true,
            },
        ),
        (
            "flush_all\r\n",
            Request::FlushAll {
                delay: 0,
                noreply: false,
            },
        ),
        (
            "flush_all 0\r\n",
            Request::FlushAll {
                delay: 0,
                noreply: false,
            },
        ),
        (
            "flush_all 30\r\n",
            Request::FlushAll {
                delay: 30,
                noreply: false,
            },
        ),
        (
            "flush_all noreply\r\n",
            Request::FlushAll {
                delay: 0,
                noreply: true,
            },
        ),
        (
            "flush_all 30 noreply\r\n",
            Request::FlushAll {
                delay: 30,
                noreply: true,
            },
        ),
        (
            "flush_all -1\r\n",
            Request::FlushAll {
                delay: -1,
                noreply: false,
            },
        ),
        ("version\r\n", Request::Version),
        // memcached ignores extra tokens on version and quit.
        ("version foo bar\r\n", Request::Version),
        ("version noreply\r\n", Request::Version),
        (
            "verbosity 1\r\n",
            Request::Verbosity {
                level: 1,
                noreply: false,
            },
        ),
        (
            "verbosity 0 noreply\r\n",
            Request::Verbosity {
                level: 0,
                noreply: true,
            },
        ),
        ("stats\r\n", Request::Stats(StatsGroup::General)),
        ("stats settings\r\n", Request::Stats(StatsGroup::Settings)),
        ("stats items\r\n", Request::Stats(StatsGroup::Items)),
        ("stats slabs\r\n", Request::Stats(StatsGroup::Slabs)),
        ("stats sizes\r\n", Request::Stats(StatsGroup::Sizes)),
        (
            "stats sizes_enable\r\n",
            Request::Stats(StatsGroup::SizesEnable),
        ),
        (
            "stats sizes_disable\r\n",
            Request::Stats(StatsGroup::SizesDisable),
        ),
        ("stats conns\r\n", Request::Stats(StatsGroup::Conns)),
        ("stats reset\r\n", Request::Stats(StatsGroup::Reset)),
        ("stats reset now\r\n", Request::Stats(StatsGroup::Reset)),
        ("stats latency\r\n", Request::Stats(StatsGroup::Latency)),
        ("stats workers\r\n", Request::Stats(StatsGroup::Workers)),
        ("stats worker\r\n", Request::Stats(StatsGroup::Worker)),
        (
            "stats cachedump 1 100\r\n",
            Request::Stats(StatsGroup::CacheDump {
                class: 1,
                limit: 100,
            }),
        ),
        (
            "stats cachedump 63 0 extra\r\n",
            Request::Stats(StatsGroup::CacheDump {
                class: 63,
                limit: 0,
            }),
        ),
        (
            "stats detail on\r\n",
            Request::Stats(StatsGroup::Detail(Detail::On)),
        ),
        (
            "stats detail off\r\n",
            Request::Stats(StatsGroup::Detail(Detail::Off)),
        ),
        (
            "stats detail dump extra\r\n",
            Request::Stats(StatsGroup::Detail(Detail::Dump)),
        ),
        (
            "slabs reassign 1 -1\r\n",
            Request::Slabs(SlabsCommand::Reassign { src: 1, dst: -1 }),
        ),
        (
            "slabs automove 2\r\n",
            Request::Slabs(SlabsCommand::Automove {
                level: 2,
                noreply: false,
            }),
        ),
        (
            "slabs automove 0 noreply\r\n",
            Request::Slabs(SlabsCommand::Automove {
                level: 0,
                noreply: true,
            }),
        ),
        (
            "slabs automove ratio 0.5\r\n",
            Request::Slabs(SlabsCommand::AutomoveRatio {
                ratio: 0.5,
                noreply: false,
            }),
        ),
        (
            "lru_crawler metadump all\r\n",
            Request::Metadump(Classes::All),
        ),
        (
            "lru_crawler metadump hash\r\n",
            Request::Metadump(Classes::Hash),
        ),
        (
            "lru_crawler metadump 1,2\r\n",
            Request::Metadump(Classes::List(b"1,2")),
        ),
        (
            "lru_crawler crawl all\r\n",
            Request::LruCrawler(CrawlerCommand::Crawl(Classes::All)),
        ),
        (
            "lru_crawler crawl 1,,3,\r\n",
            Request::LruCrawler(CrawlerCommand::Crawl(Classes::List(b"1,,3,"))),
        ),
        (
            "lru_crawler crawl hash\r\n",
            Request::LruCrawler(CrawlerCommand::Crawl(Classes::Hash)),
        ),
        (
            "lru_crawler tocrawl 0\r\n",
            Request::LruCrawler(CrawlerCommand::ToCrawl(0)),
        ),
        // memcached keeps a number past 32 bits modulo 2^32.
        (
            "lru_crawler tocrawl 4294967297\r\n",
            Request::LruCrawler(CrawlerCommand::ToCrawl(1)),
        ),
        (
            "lru_crawler sleep 1000000\r\n",
            Request::LruCrawler(CrawlerCommand::Sleep(1_000_000)),
        ),
        (
            "lru_crawler enable\r\n",
            Request::LruCrawler(CrawlerCommand::Enable),
        ),
        (
            "lru_crawler disable\r\n",
            Request::LruCrawler(CrawlerCommand::Disable),
        ),
        (
            "cache_memlimit 8\r\n",
            Request::CacheMemlimit {
                megabytes: 8,
                noreply: false,
            },
        ),
        (
            "cache_memlimit 1000000000 noreply\r\n",
            Request::CacheMemlimit {
                megabytes: 1_000_000_000,
                noreply: true,
            },
        ),
        // Only a last `noreply` counts; another second argument is ignored.
        (
            "cache_memlimit 64 foo\r\n",
            Request::CacheMemlimit {
                megabytes: 64,
                noreply: false,
            },
        ),
        (
            "watch\r\n",
            Request::Watch(WatchEvents {
                fetchers: true,
                ..WatchEvents::default()
            }),
        ),
        (
            "watch mutations connevents evictions\r\n",
            Request::Watch(WatchEvents {
                fetchers: false,
                mutations: true,
                evictions: true,
                connevents: true,
            }),
        ),
        ("shutdown\r\n", Request::Shutdown(ShutdownMode::Now)),
        (
            "shutdown graceful\r\n",
            Request::Shutdown(ShutdownMode::Graceful),
        ),
        ("shutdown now\r\n", Request::Shutdown(ShutdownMode::Invalid)),
        (
            "shutdown graceful x\r\n",
            Request::Shutdown(ShutdownMode::Invalid),
        ),
        ("quit\r\n", Request::Quit),
        ("quit foo bar\r\n", Request::Quit),
    ];
    for (line, expected) in cases {
        assert_eq!(parse_ok(line), *expected, "{line}");
    }
    // A bare newline ends a line too, and runs of spaces separate nothing.
    assert_eq!(keys(parse_ok("  get   k  \n")), [b"k"]);
}

#[test]
fn every_error() {
    use ErrorReply::*;
    let cases: &[(&str, ErrorReply, bool)] = &[
        // Token counts and unknown commands.
        ("\r\n", Error, false),
        ("\n", Error, false),
        ("   \r\n", Error, false),
        ("g\r\n", Error, false),
        ("bogus\r\n", Error, false),
        ("GET\r\n", Error, false),
        ("get\r\n", Error, false),
        ("gets\r\n", Error, false),
        ("gat\r\n", Error, false),
        ("gxx k\r\n", Error, false),
        ("set k 0 0\r\n", Error, false),
        ("set k 0 0 5 noreply extra\r\n", Error, false),
        ("add k\r\n", Error, false),
        ("cas k 0 0 5\r\n", Error, false),
        ("incr k\r\n", Error, false),
        ("decr k 1 noreply x\r\n", Error, false),
        ("delete\r\n", Error, false),
        ("delete a b c d e\r\n", Error, false),
        ("touch k\r\n", Error, false),
        ("flush_all 1 2 3\r\n", Error, false),
        ("verbosity\r\n", Error, false),
        ("verbosity foo bar my\r\n", Error, false),
        ("stats bogus\r\n", Error, false),
        ("stats cachedump\r\n", BadCommandLine, false),
        ("stats cachedump 1\r\n", BadCommandLine, false),
        ("stats cachedump x 1\r\n", BadFormat, false),
        ("stats cachedump 1 -1\r\n", BadFormat, false),
        ("stats cachedump 64 0\r\n", IllegalSlabId, false),
        ("stats detail\r\n", DetailUsage, false),
        ("stats detail bogus\r\n", DetailUsage, false),
        ("slabs\r\n", Error, false),
        ("slabs bogus\r\n", Error, false),
        ("slabs reassign\r\n", Error, false),
        ("slabs reassign 1\r\n", Error, false),
        ("slabs reassign 1 2 3\r\n", Error, false),
        ("slabs reassign x 2\r\n", BadFormat, false),
        ("slabs automove\r\n", Error, false),
        ("slabs automove bad\r\n", BadFormat, false),
        ("slabs automove bad noreply\r\n", BadFormat, true),
        ("slabs automove 3\r\n", Error, false),
        ("slabs automove ratio\r\n", Error, false),
        ("slabs automove ratio x\r\n", Error, false),
        ("lru_crawler\r\n", Error, false),
        ("lru_crawler metadump\r\n", Error, false),
        ("lru_crawler metadump all extra\r\n", Error, false),
        ("lru_crawler crawl\r\n", Error, false),
        ("lru_crawler crawl 1 noreply\r\n", Error, false),
        ("lru_crawler tocrawl\r\n", Error, false),
        ("lru_crawler tocrawl 1 2\r\n", Error, false),
        ("lru_crawler tocrawl x\r\n", BadFormat, false),
        ("lru_crawler tocrawl -1\r\n", BadFormat, false),
        ("lru_crawler sleep -5\r\n", BadFormat, false),
        ("lru_crawler sleep 1000001\r\n", CrawlerSleepTooLong, false),
        ("lru_crawler enable now\r\n", Error, false),
        ("lru_crawler bogus\r\n", Error, false),
        ("cache_memlimit\r\n", Error, false),
        ("cache_memlimit 1 2 3\r\n", Error, false),
        ("cache_memlimit x\r\n", Error, false),
        ("cache_memlimit -1\r\n", Error, false),
        ("cache_memlimit x noreply\r\n", Error, true),
        ("cache_memlimit 7\r\n", MemlimitTooSmall, false),
        ("cache_memlimit 0\r\n", MemlimitTooSmall, false),
        // 2^32 is 0 to memcached.
        ("cache_memlimit 4294967296\r\n", MemlimitTooSmall, false),
        ("cache_memlimit 5 noreply\r\n", MemlimitTooSmall, true),
        ("cache_memlimit 1000000001\r\n", MemlimitNotMegabytes, false),
        ("cache_memlimit 4294967295\r\n", MemlimitNotMegabytes, false),
        ("watch bogus\r\n", Error, false),
        ("watch fetchers noreply\r\n", Error, false),
        ("mx k\r\n", Error, false),
        // Keys.
        (&*format!("get {}\r\n", "k".repeat(251)), BadFormat, false),
        (
            &*format!("get a {} b\r\n", "k".repeat(251)),
            BadFormat,
            false,
        ),
        ("get a\tb\r\n", BadFormat, false),
        ("get a\x7fb\r\n", BadFormat, false),
        ("get \x01\r\n", BadFormat, false),
        (
            &*format!("set {} 0 0 1\r\n", "k".repeat(251)),
            BadFormat,
            false,
        ),
        ("set k\x01 0 0 1 noreply\r\n", BadFormat, true),
        (
            &*format!("delete {}\r\n", "k".repeat(251)),
            BadFormat,
            false,
        ),
        (
            &*format!("incr {} 1\r\n", "k".repeat(251)),
            BadFormat,
            false,
        ),
        (
            &*format!("touch {} 1\r\n", "k".repeat(251)),
            BadFormat,
            false,
        ),
        // Numbers.
        ("set k x 0 1\r\n", BadFormat, false),
        ("set k -1 0 1\r\n", BadFormat, false),
        ("set k 4294967296 0 1\r\n", BadFormat, false),
        ("set k 0 x 1\r\n", BadFormat, false),
        ("set k 0 2147483648 1\r\n", BadFormat, false),
        ("set k 0 0 x\r\n", BadFormat, false),
        ("set k 0 0 -1\r\n", BadFormat, false),
        ("set k 0 0 2147483646\r\n", BadFormat, false),
        ("set k 0 0 1x\r\n", BadFormat, false),
        ("set k 0 0 abc noreply\r\n", BadFormat, true),
        ("cas k 0 0 1 x\r\n", BadFormat, false),
        ("cas k 0 0 1 -1\r\n", BadFormat, false),
        ("incr k x\r\n", InvalidDelta, false),
        ("incr k -1\r\n", InvalidDelta, false),
        ("incr k 18446744073709551616\r\n", InvalidDelta, false),
        ("decr k x noreply\r\n", InvalidDelta, true),
        ("touch k x\r\n", InvalidExptime, false),
        ("gat x k\r\n", InvalidExptime, false),
        ("gats 1.5 k\r\n", InvalidExptime, false),
        ("flush_all x\r\n", InvalidExptime, false),
        ("flush_all x noreply\r\n", InvalidExptime, true),
        ("verbosity x\r\n", BadFormat, false),
        ("verbosity noreply\r\n", BadFormat, true),
        // delete's old hold-time argument must be 0.
        ("delete k 5\r\n", DeleteUsage, false),
        ("delete k x noreply\r\n", DeleteUsage, true),
        ("delete k 0 0\r\n", DeleteUsage, false),
    ];
    for &(line, reply, noreply) in cases {
        assert_eq!(parse_err(line), (reply, noreply), "{line:?}");
    }
}

#[test]
fn http_requests_close() {
    for line in [
        "GET / HTTP/1.1\r\n",
        "POST /x HTTP/1.0\r\n",
        "HEAD / HTTP/2\r\n",
    ] {
        assert_eq!(
            Request::parse(line.as_bytes(), 0),
            Err(ParseError::Close(Close::Http)),
            "{line}"
        );
    }
    // Lowercase `get` is the get command; keys that look like HTTP are just keys.
    assert_eq!(
        keys(parse_ok("get / HTTP/1.1\r\n")),
        [&b"/"[..], b"HTTP/1.1"]
    );
    // memcached's first-letter branches answer ERROR without the HTTP check.
    assert_eq!(
        parse_err("delete / HTTP/1.1\r\n").0,
        ErrorReply::DeleteUsage
    );
    assert_eq!(parse_err("gimme / HTTP/1.1\r\n").0, ErrorReply::Error);
}

#[test]
fn line_limit() {
    // 2048 bytes without a newline: still waiting; 2049: closed.
    let junk = vec![b'x'; MAX_LINE_LEN];
    assert!(matches!(
        Request::parse(&junk, 0),
        Err(ParseError::Incomplete { needed: 1, .. })
    ));
    let mut longer = junk.clone();
    longer.push(b'x');
    assert_eq!(
        Request::parse(&longer, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
    // A complete line up to the limit is parsed (and refused as a command); one byte more and
    // it closes, as it would have before its newline arrived.
    let mut line = vec![b'x'; MAX_LINE_LEN];
    line.extend_from_slice(b"\n");
    assert!(matches!(
        Request::parse(&line, 0),
        Err(ParseError::Invalid {
            reply: ErrorReply::Error,
            ..
        })
    ));
    line.insert(0, b'x');
    assert_eq!(
        Request::parse(&line, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
    // A set line is no exception.
    let mut set = b"set ".to_vec();
    set.resize(MAX_LINE_LEN + 1, b'k');
    assert_eq!(
        Request::parse(&set, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
}

/// Found by the `text` fuzz target: the line limit was checked only while the newline had not
/// arrived, so a 2,311-byte `set` line was parsed when it came in one piece and closed the
/// connection when it came in two (and the engine's replies depended on how a client's bytes
/// were split). The limit now holds for complete lines too.
#[test]
fn line_limit_does_not_depend_on_how_the_line_arrives() {
    for (prefix, limit) in [
        (&b"set "[..], MAX_LINE_LEN),
        (b"mg ", MAX_LINE_LEN),
        (b"gat 0 ", MAX_LINE_LEN),
        (b"get ", MAX_MULTIGET_LINE_LEN),
        (b"  gets ", MAX_MULTIGET_LINE_LEN),
    ] {
        for len in [limit - 1, limit, limit + 1, limit + 300] {
            let mut line = prefix.to_vec();
            line.resize(len, b'k');
            line.extend_from_slice(b"\r\n");
            let whole = Request::parse(&line, 0);
            // The same bytes arriving in two pieces, the first just past the limit.
            let cut = (limit + 1).min(line.len());
            let first = Request::parse(&line[..cut], 0);
            let verdict = match first {
                Err(ParseError::Incomplete { scanned, .. }) => Request::parse(&line, scanned),
                other => other,
            };
            assert_eq!(whole, verdict, "{:?}... of {len} bytes", &line[..8]);
            // `\r` counts as part of the line, as it does before the `\n` arrives.
            let closes = len + 1 > limit;
            let closed = whole == Err(ParseError::Close(Close::LineTooLong));
            assert_eq!(closed, closes, "{:?}... of {len} bytes", &line[..8]);
        }
    }
}

#[test]
fn long_multiget_lines_may_grow_to_their_own_limit() {
    let mut line = b"get".to_vec();
    for i in 0..2000 {
        line.extend_from_slice(format!(" key:{i:06}").as_bytes());
    }
    assert!(line.len() > MAX_LINE_LEN);
    match Request::parse(&line, 0) {
        Err(ParseError::Incomplete { needed, scanned }) => {
            assert_eq!(scanned, line.len());
            assert_eq!(needed, 16 * 1024);
        }
        other => panic!("{other:?}"),
    }
    line.extend_from_slice(b"\r\n");
    assert_eq!(keys(Request::parse(&line, 0).unwrap().0).len(), 2000);
    // gets too, after a few leading spaces.
    let mut gets = b"   gets ".to_vec();
    gets.resize(MAX_LINE_LEN + 100, b'k');
    assert!(matches!(
        Request::parse(&gets, 0),
        Err(ParseError::Incomplete { .. })
    ));
    // More than 100 leading spaces, or a gat, is not a multiget.
    let mut spaced = vec![b' '; 101];
    spaced.extend_from_slice(b"get ");
    spaced.resize(MAX_LINE_LEN + 1, b'k');
    assert_eq!(
        Request::parse(&spaced, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
    let mut gat = b"gat 0 ".to_vec();
    gat.resize(MAX_LINE_LEN + 1, b'k');
    assert_eq!(
        Request::parse(&gat, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
    // The multiget limit itself.
    let mut huge = b"get ".to_vec();
    huge.resize(MAX_MULTIGET_LINE_LEN, b'k');
    match Request::parse(&huge, 0) {
        Err(ParseError::Incomplete { needed, .. }) => assert_eq!(needed, 1),
        other => panic!("{other:?}"),
    }
    huge.push(b'k');
    assert_eq!(
        Request::parse(&huge, 0),
        Err(ParseError::Close(Close::LineTooLong))
    );
}

#[test]
fn scanned_hint_skips_searched_bytes() {
    let buf = b"get abc\r\n";
    for scanned in 0..=7 {
        assert_eq!(Request::parse(buf, scanned).unwrap().1, 9);
    }
    // A hint past the buffer is clamped.
    assert!(matches!(
        Request::parse(b"get", 10),
        Err(ParseError::Incomplete { scanned: 3, .. })
    ));
}

#[test]
fn every_truncation_is_incomplete() {
    for line in [
        "get hello\r\n",
        "gats 10 a b c\r\n",
        "set k 0 0 5 noreply\r\n",
        "delete k\r\n",
        "mg k v t Oabc\r\n",
        "ms k 5 T10\r\n",
        "bogus\r\n",
    ] {
        let bytes = line.as_bytes();
        for n in 0..bytes.len() {
            match Request::parse(&bytes[..n], 0) {
                Err(ParseError::Incomplete { needed, scanned }) => {
                    assert_eq!(scanned, n);
                    assert_eq!(needed, (MAX_LINE_LEN + 1 - n).min(16 * 1024));
                }
                other => panic!("{line:?}[..{n}]: {other:?}"),
            }
        }
        assert!(!matches!(
            Request::parse(bytes, 0),
            Err(ParseError::Incomplete { .. })
        ));
    }
    // The data block: every truncation names exactly the bytes missing.
    let data = b"hello\r\n";
    for n in 0..data.len() {
        assert_eq!(
            data_block(&data[..n], 5),
            Err(DataError::Incomplete { needed: 7 - n })
        );
    }
    assert_eq!(data_block(data, 5), Ok(&b"hello"[..]));
}

#[test]
fn data_blocks() {
    assert_eq!(data_block(b"\r\n", 0), Ok(&b""[..]));
    assert_eq!(data_block(b"ab\r\nrest", 2), Ok(&b"ab"[..]));
    // Binary-safe: CR, LF and NUL inside the data are data.
    assert_eq!(data_block(b"\r\n\0\n\r\n", 4), Ok(&b"\r\n\0\n"[..]));
    assert_eq!(data_block(b"abcdef\r\n", 3), Err(DataError::BadChunk));
    assert_eq!(data_block(b"abc\n\r", 3), Err(DataError::BadChunk));
    assert_eq!(data_block(b"abc\rx", 3), Err(DataError::BadChunk));
    assert_eq!(
        data_block(b"", usize::MAX),
        Err(DataError::Incomplete { needed: usize::MAX })
    );
}

/// A pipeline of every kind of request, errors and a bad data chunk included.
fn pipeline() -> (Vec<u8>, Vec<Event>) {
    let stream = concat!(
        "set a 1 0 5\r\nhello\r\n",
        "get a b\r\n",
        "gets a\n",
        "gat 10 a\r\n",
        "append a 0 0 3 noreply\r\n!!!\r\n",
        "cas a 0 0 2 99\r\nhi\r\n",
        "incr n 5\r\n",
        "decr n 5 noreply\r\n",
        "touch a 0\r\n",
        "delete a\r\n",
        "set b 0 0 3\r\nabcdef\r\n",
        "bogus\r\n",
        "set c 0 0 -1\r\n",
        "mg a v k Oq1\r\n",
        "ms a 2 T0 MS\r\nhi\r\n",
        "ms a 2 Z\r\nhi\r\n",
        "md a q\r\n",
        "ma n D2 MD\r\n",
        "mn\r\n",
        "me a\r\n",
        "flush_all 0\r\n",
        "stats items\r\n",
        "version\r\n",
        "verbosity 0\r\n",
        "quit\r\n",
    )
    .as_bytes()
    .to_vec();
    let (events, consumed) = read(&stream, &mut Reader::default());
    assert_eq!(consumed, stream.len());
    (stream, events)
}

#[test]
fn pipelined_requests_in_order() {
    let (_, events) = pipeline();
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::Request(text, data) => format!(
                "{}{}",
                text.split(['(', ' ', '{']).next().unwrap(),
                if data.is_empty() {
                    String::new()
                } else {
                    format!("={}", String::from_utf8_lossy(data))
                }
            ),
            Event::Error(reply, _, swallow) => format!("{reply:?}+{swallow}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "Store=hello",
            "Get",
            "Get",
            "Get",
            "Store=!!!",
            "Store=hi",
            "Arithmetic",
            "Arithmetic",
            "Touch",
            "Delete",
            "BadChunk",
            // memcached reads 5 bytes as the data block, then `f\r\n` as a command.
            "Error+0",
            "Error+0",
            "BadFormat+0",
            "Meta",
            "Meta=hi",
            "InvalidFlag+4",
            "Meta",
            "Meta",
            "Meta",
            "Meta",
            "FlushAll",
            "Stats",
            "Version",
            "Verbosity",
            "Quit",
        ]
    );
}

#[test]
fn fragment_sweeps_see_the_same_requests() {
    let (stream, whole) = pipeline();
    for chunk in [1, 2, 5, 10, 100] {
        assert_eq!(feed(&stream, chunk), whole, "chunk {chunk}");
    }
}

#[test]
fn trailing_bytes_are_left_untouched() {
    let buf = b"get a\r\nget b";
    let (request, len) = Request::parse(buf, 0).unwrap();
    assert_eq!(keys(request), [b"a"]);
    assert_eq!(&buf[len..], b"get b");
    let buf = b"set k 0 0 2\r\nhi\r\nge";
    let (request, len) = Request::parse(buf, 0).unwrap();
    let Request::Store(store) = request else {
        panic!()
    };
    assert_eq!(data_block(&buf[len..], store.bytes), Ok(&b"hi"[..]));
    assert_eq!(&buf[len + store.bytes + 2..], b"ge");
}

#[test]
fn numbers() {
    assert_eq!(parse_u64(b"0"), Some(0));
    assert_eq!(parse_u64(b"+7"), Some(7));
    assert_eq!(parse_u64(b"007"), Some(7));
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    for bad in [
        &b""[..],
        b"+",
        b"-1",
        b"-0",
        b"++1",
        b"1 ",
        b"0x10",
        b"18446744073709551616",
    ] {
        assert_eq!(parse_u64(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
    assert_eq!(parse_u32(b"4294967296"), None);
    assert_eq!(parse_i32(b"-2147483648"), Some(-2147483648));
    assert_eq!(parse_i32(b"2147483647"), Some(2147483647));
    assert_eq!(parse_i32(b"+5"), Some(5));
    assert_eq!(parse_i32(b"-0"), Some(0));
    for bad in [
        &b""[..],
        b"-",
        b"2147483648",
        b"-2147483649",
        b"+-1",
        b"-+1",
        b"1.0",
    ] {
        assert_eq!(parse_i32(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
    let mut out = Vec::new();
    push_u64(&mut out, 0);
    push_u64(&mut out, u64::MAX);
    push_i64(&mut out, -1);
    push_i64(&mut out, i64::MIN);
    assert_eq!(out, b"018446744073709551615-1-9223372036854775808");
}

#[test]
fn tokens_split_on_spaces_only() {
    let tokens: Vec<&[u8]> = Tokens::new(b"  a\tb  c ").collect();
    assert_eq!(tokens, [&b"a\tb"[..], b"c"]);
    assert_eq!(Tokens::new(b"   ").next(), None);
    let mut t = Tokens::new(b"x y z");
    t.next();
    assert_eq!(t.remainder(), b" y z");
}

#[test]
fn keys_are_checked() {
    assert!(is_valid_key(b"a"));
    assert!(is_valid_key(&[b'k'; 250]));
    assert!(is_valid_key("ü".as_bytes()));
    assert!(!is_valid_key(b""));
    assert!(!is_valid_key(&[b'k'; 251]));
    for control in (0u8..=b' ').chain([0x7f]) {
        assert!(!is_valid_key(&[b'a', control]), "{control:#x}");
    }
}

#[test]
fn responses() {
    let cases: &[(Response<'_>, &[u8])] = &[
        (
            Response::Value {
                key: b"k",
                flags: 5,
                value: b"hi",
                cas: None,
            },
            b"VALUE k 5 2\r\nhi\r\n",
        ),
        (
            Response::Value {
                key: b"key",
                flags: u32::MAX,
                value: b"",
                cas: Some(42),
            },
            b"VALUE key 4294967295 0 42\r\n\r\n",
        ),
        (Response::End, b"END\r\n"),
        (Response::Stored, b"STORED\r\n"),
        (Response::NotStored, b"NOT_STORED\r\n"),
        (Response::Exists, b"EXISTS\r\n"),
        (Response::NotFound, b"NOT_FOUND\r\n"),
        (Response::Deleted, b"DELETED\r\n"),
        (Response::Touched, b"TOUCHED\r\n"),
        (Response::Ok, b"OK\r\n"),
        (
            Response::Number(18446744073709551615),
            b"18446744073709551615\r\n",
        ),
        (Response::Number(0), b"0\r\n"),
        (Response::Version("1.6.18-x"), b"VERSION 1.6.18-x\r\n"),
        (
            Response::Stat {
                name: "pid",
                value: "42",
            },
            b"STAT pid 42\r\n",
        ),
        (
            Response::Error(ErrorReply::TooLarge),
            b"SERVER_ERROR object too large for cache\r\n",
        ),
    ];
    for (response, expected) in cases {
        let mut out = vec![0xa5];
        response.emit_into(&mut out);
        assert_eq!(&out[1..], *expected, "{response:?}");
        assert_eq!(response.buffer_len(), expected.len(), "{response:?}");
    }
}

#[test]
fn metadump_class_lists() {
    let numbers = |c: Classes<'_>| c.numbers().map(|n| n.collect::<Vec<u32>>());
    assert_eq!(numbers(Classes::List(b"1")), Some(vec![1]));
    assert_eq!(numbers(Classes::List(b"1,3,10")), Some(vec![1, 3, 10]));
    assert_eq!(numbers(Classes::List(b"1,x")), None);
    assert_eq!(numbers(Classes::List(b"x")), None);
    // memcached skips empty items, and keeps a number modulo 2^32.
    assert_eq!(numbers(Classes::List(b"1,,3,")), Some(vec![1, 3]));
    assert_eq!(numbers(Classes::List(b",")), Some(vec![]));
    assert_eq!(numbers(Classes::List(b"4294967297")), Some(vec![1]));
    assert_eq!(numbers(Classes::All), Some(vec![]));
}
