//! Tests of the string and bitmap commands (`strings.rs`, `bits.rs`): every command and error
//! as redis-server 7.0.15 answers them, the item limit in place of Redis's 512 MB, expiry
//! kept by the read-modify-writes, and the two-key commands across workers.

use protocol::resp::Version;

use super::tests::{call, command, config, now, resp2, run_at, run_on_two_workers};
use crate::engine::tests::engine;
use crate::engine::*;

/// Commands and the raw replies redis-server 7.0.15 gives them, run in order on one
/// connection from an empty database (`redis-cli` over a socket; the few whose offsets pass
/// 1 MiB, where memspin's item limit answers instead, are in
/// [`offsets_past_the_item_limit_are_refused`]).
#[rustfmt::skip]
const SCRIPT: &[(&[&[u8]], &[u8])] = &[
    (&[b"FLUSHALL"], b"+OK\r\n"),
    (&[b"SET", b"f", b"10.50"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"0.1"], b"$4\r\n10.6\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"-5"], b"$3\r\n5.6\r\n"),
    (&[b"SET", b"f", b"5.0e3"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"2.0e2"], b"$4\r\n5200\r\n"),
    (&[b"SET", b"f", b"0.1"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"0.2"], b"$3\r\n0.3\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"1e-20"], b"$3\r\n0.3\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"-0.3"], b"$1\r\n0\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"3"], b"$1\r\n3\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"-3.0"], b"$1\r\n0\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"1.23456789012345678"], b"$19\r\n1.23456789012345678\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"abc"], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"inf"], b"-ERR increment would produce NaN or Infinity\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"-inf"], b"-ERR increment would produce NaN or Infinity\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"nan"], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b""], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"1 "], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b".5"], b"$19\r\n1.73456789012345678\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"5."], b"$19\r\n6.73456789012345678\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"+1"], b"$19\r\n7.73456789012345678\r\n"),
    (&[b"INCRBYFLOAT", b"nf", b"1E2"], b"$21\r\n107.73456789012345678\r\n"),
    (&[b"SET", b"s", b"hello"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"s", b"1"], b"-ERR value is not a valid float\r\n"),
    (&[b"SET", b"f", b"1", b"EX", b"100"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"1"], b"$1\r\n2\r\n"),
    (&[b"TTL", b"f"], b":100\r\n"),
    (&[b"INCRBYFLOAT", b"f"], b"-ERR wrong number of arguments for 'incrbyfloat' command\r\n"),
    (&[b"SETRANGE", b"r", b"5", b"abc"], b":8\r\n"),
    (&[b"GET", b"r"], b"$8\r\n\x00\x00\x00\x00\x00abc\r\n"),
    (&[b"STRLEN", b"r"], b":8\r\n"),
    (&[b"SETRANGE", b"r", b"0", b"XY"], b":8\r\n"),
    (&[b"GET", b"r"], b"$8\r\nXY\x00\x00\x00abc\r\n"),
    (&[b"SETRANGE", b"r", b"-1", b"x"], b"-ERR offset is out of range\r\n"),
    (&[b"SETRANGE", b"r", b"x", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"SETRANGE", b"r", b"2", b""], b":8\r\n"),
    (&[b"SETRANGE", b"nr", b"2", b""], b":0\r\n"),
    (&[b"EXISTS", b"nr"], b":0\r\n"),
    (&[b"SETRANGE", b"r", b"4611686018427387904", b"x"], b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n"),
    (&[b"SET", b"t", b"hello", b"EX", b"100"], b"+OK\r\n"),
    (&[b"SETRANGE", b"t", b"1", b"E"], b":5\r\n"),
    (&[b"TTL", b"t"], b":100\r\n"),
    (&[b"GETRANGE", b"t", b"0", b"-1"], b"$5\r\nhEllo\r\n"),
    (&[b"GETRANGE", b"t", b"1", b"3"], b"$3\r\nEll\r\n"),
    (&[b"GETRANGE", b"t", b"-3", b"-1"], b"$3\r\nllo\r\n"),
    (&[b"GETRANGE", b"t", b"-1", b"-3"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"t", b"10", b"20"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"t", b"-100", b"100"], b"$5\r\nhEllo\r\n"),
    (&[b"GETRANGE", b"t", b"3", b"1"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"missing", b"0", b"-1"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"t", b"a", b"1"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"GETRANGE", b"t", b"0", b"b"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"SUBSTR", b"t", b"0", b"2"], b"$3\r\nhEl\r\n"),
    (&[b"SUBSTR", b"t"], b"-ERR wrong number of arguments for 'substr' command\r\n"),
    (&[b"SETBIT", b"b", b"7", b"1"], b":0\r\n"),
    (&[b"SETBIT", b"b", b"7", b"0"], b":1\r\n"),
    (&[b"SETBIT", b"b", b"100", b"1"], b":0\r\n"),
    (&[b"GET", b"b"], b"$13\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x08\r\n"),
    (&[b"STRLEN", b"b"], b":13\r\n"),
    (&[b"GETBIT", b"b", b"100"], b":1\r\n"),
    (&[b"GETBIT", b"b", b"101"], b":0\r\n"),
    (&[b"GETBIT", b"b", b"1000000"], b":0\r\n"),
    (&[b"GETBIT", b"missing", b"3"], b":0\r\n"),
    (&[b"SETBIT", b"b", b"8", b"2"], b"-ERR bit is not an integer or out of range\r\n"),
    (&[b"SETBIT", b"b", b"x", b"1"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"SETBIT", b"b", b"-1", b"1"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"GETBIT", b"b", b"-1"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"GETBIT", b"b", b"x"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"SET", b"bc", b"foobar"], b"+OK\r\n"),
    (&[b"BITCOUNT", b"bc"], b":26\r\n"),
    (&[b"BITCOUNT", b"bc", b"0", b"0"], b":4\r\n"),
    (&[b"BITCOUNT", b"bc", b"1", b"1"], b":6\r\n"),
    (&[b"BITCOUNT", b"bc", b"1", b"1", b"BYTE"], b":6\r\n"),
    (&[b"BITCOUNT", b"bc", b"5", b"30", b"BIT"], b":17\r\n"),
    (&[b"BITCOUNT", b"bc", b"-2", b"-1"], b":7\r\n"),
    (&[b"BITCOUNT", b"bc", b"-1", b"-2"], b":0\r\n"),
    (&[b"BITCOUNT", b"bc", b"0", b"-1", b"BIT"], b":26\r\n"),
    (&[b"BITCOUNT", b"bc", b"0", b"100"], b":26\r\n"),
    (&[b"BITCOUNT", b"bc", b"1"], b"-ERR syntax error\r\n"),
    (&[b"BITCOUNT", b"bc", b"1", b"2", b"3"], b"-ERR syntax error\r\n"),
    (&[b"BITCOUNT", b"bc", b"x", b"1"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"BITCOUNT", b"bc", b"1", b"2", b"foo"], b"-ERR syntax error\r\n"),
    (&[b"BITCOUNT", b"bc", b"0", b"-1", b"bit", b"extra"], b"-ERR syntax error\r\n"),
    (&[b"BITCOUNT", b"missing"], b":0\r\n"),
    (&[b"BITCOUNT", b"missing", b"1"], b":0\r\n"),
    (&[b"SET", b"bp", b"\xff\xf0\x00"], b"+OK\r\n"),
    (&[b"BITPOS", b"bp", b"0"], b":12\r\n"),
    (&[b"SET", b"bp", b"\x00\xff\xf0"], b"+OK\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"0"], b":8\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"2"], b":16\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"2", b"-1", b"BYTE"], b":16\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"7", b"15", b"BIT"], b":8\r\n"),
    (&[b"SET", b"bp", b"\x00\x00\x00"], b"+OK\r\n"),
    (&[b"BITPOS", b"bp", b"1"], b":-1\r\n"),
    (&[b"BITPOS", b"bp", b"0"], b":0\r\n"),
    (&[b"SET", b"bp", b"\xff\xff\xff"], b"+OK\r\n"),
    (&[b"BITPOS", b"bp", b"0"], b":24\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"0"], b":24\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"0", b"-1"], b":-1\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"0", b"-1", b"BIT"], b":-1\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"1", b"BIT"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"3"], b":-1\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"-1"], b":16\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"5", b"2"], b":-1\r\n"),
    (&[b"BITPOS", b"bp", b"2"], b"-ERR The bit argument must be 1 or 0.\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"0", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"0", b"1", b"foo"], b"-ERR syntax error\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"0", b"1", b"bit", b"extra"], b"-ERR syntax error\r\n"),
    (&[b"BITPOS", b"missing", b"0"], b":0\r\n"),
    (&[b"BITPOS", b"missing", b"1"], b":-1\r\n"),
    (&[b"BITPOS", b"missing", b"3"], b"-ERR The bit argument must be 1 or 0.\r\n"),
    (&[b"SET", b"bp", b"\x00\x00\x01"], b"+OK\r\n"),
    (&[b"BITPOS", b"bp", b"1", b"0", b"-1", b"BIT"], b":23\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"20", b"23", b"BIT"], b":20\r\n"),
    (&[b"BITPOS", b"bp", b"0", b"23", b"23", b"BIT"], b":-1\r\n"),
    (&[b"SET", b"k1", b"foobar"], b"+OK\r\n"),
    (&[b"SET", b"k2", b"abcdef"], b"+OK\r\n"),
    (&[b"BITOP", b"AND", b"dest", b"k1", b"k2"], b":6\r\n"),
    (&[b"GET", b"dest"], b"$6\r\n`bc`ab\r\n"),
    (&[b"BITOP", b"OR", b"dest", b"k1", b"k2"], b":6\r\n"),
    (&[b"GET", b"dest"], b"$6\r\ngoofev\r\n"),
    (&[b"BITOP", b"XOR", b"dest", b"k1", b"k2", b"missing"], b":6\r\n"),
    (&[b"GET", b"dest"], b"$6\r\n\x07\r\x0c\x06\x04\x14\r\n"),
    (&[b"BITOP", b"NOT", b"dest", b"k1"], b":6\r\n"),
    (&[b"GET", b"dest"], b"$6\r\n\x99\x90\x90\x9d\x9e\x8d\r\n"),
    (&[b"BITOP", b"NOT", b"dest", b"k1", b"k2"], b"-ERR BITOP NOT must be called with a single source key.\r\n"),
    (&[b"BITOP", b"FOO", b"dest", b"k1"], b"-ERR syntax error\r\n"),
    (&[b"BITOP", b"AND", b"dest", b"missing", b"other"], b":0\r\n"),
    (&[b"EXISTS", b"dest"], b":0\r\n"),
    (&[b"SET", b"dest", b"x", b"EX", b"100"], b"+OK\r\n"),
    (&[b"BITOP", b"OR", b"dest", b"k1"], b":6\r\n"),
    (&[b"TTL", b"dest"], b":-1\r\n"),
    (&[b"SET", b"short", b"ab"], b"+OK\r\n"),
    (&[b"BITOP", b"AND", b"dest", b"k1", b"short"], b":6\r\n"),
    (&[b"GET", b"dest"], b"$6\r\n`b\x00\x00\x00\x00\r\n"),
    (&[b"SET", b"l1", b"ohmytext"], b"+OK\r\n"),
    (&[b"SET", b"l2", b"mynewtext"], b"+OK\r\n"),
    (&[b"LCS", b"l1", b"l2"], b"$6\r\nmytext\r\n"),
    (&[b"LCS", b"l1", b"l2", b"LEN"], b":6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX"], b"*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX", b"MINMATCHLEN", b"4"], b"*4\r\n$7\r\nmatches\r\n*1\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX", b"MINMATCHLEN", b"4", b"WITHMATCHLEN"], b"*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX", b"WITHMATCHLEN"], b"*4\r\n$7\r\nmatches\r\n*2\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n*3\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n:2\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"LEN", b"IDX"], b"-ERR If you want both the length and indexes, please just use IDX.\r\n"),
    (&[b"LCS", b"l1", b"l2", b"MINMATCHLEN", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"LCS", b"l1", b"l2", b"MINMATCHLEN", b"-5", b"IDX"], b"*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"FOO"], b"-ERR syntax error\r\n"),
    (&[b"LCS", b"l1", b"l2", b"MINMATCHLEN"], b"-ERR syntax error\r\n"),
    (&[b"LCS", b"l1", b"missing"], b"$0\r\n\r\n"),
    (&[b"LCS", b"missing", b"missing2", b"IDX"], b"*4\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n"),
    (&[b"LCS", b"l1"], b"-ERR wrong number of arguments for 'lcs' command\r\n"),
    (&[b"BITFIELD", b"bf", b"SET", b"i8", b"0", b"100", b"GET", b"u4", b"0"], b"*2\r\n:0\r\n:6\r\n"),
    (&[b"BITFIELD", b"bf", b"INCRBY", b"i5", b"100", b"1", b"GET", b"u4", b"0"], b"*2\r\n:1\r\n:6\r\n"),
    (&[b"BITFIELD", b"bf", b"INCRBY", b"u2", b"100", b"1", b"OVERFLOW", b"SAT", b"INCRBY", b"i8", b"0", b"200"], b"*2\r\n:1\r\n:127\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"FAIL", b"INCRBY", b"u2", b"102", b"5"], b"*1\r\n$-1\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"WRAP", b"INCRBY", b"u2", b"102", b"5"], b"*1\r\n:1\r\n"),
    (&[b"BITFIELD", b"bf", b"SET", b"u8", b"#1", b"255", b"GET", b"u8", b"8", b"GET", b"i8", b"#1"], b"*3\r\n:0\r\n:255\r\n:-1\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"i64", b"0", b"GET", b"u63", b"1"], b"*2\r\n:9223090561878065152\r\n:9223090561878065152\r\n"),
    (&[b"BITFIELD", b"bf", b"SET", b"i64", b"0", b"-1", b"INCRBY", b"i64", b"0", b"1"], b"*2\r\n:9223090561878065152\r\n:0\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"SAT", b"SET", b"i64", b"0", b"9223372036854775807", b"INCRBY", b"i64", b"0", b"1"], b"*2\r\n:0\r\n:9223372036854775807\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"SAT", b"INCRBY", b"i64", b"0", b"-9223372036854775808", b"INCRBY", b"i64", b"0", b"-9223372036854775807"], b"*2\r\n:-1\r\n:-9223372036854775808\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"WRAP", b"SET", b"i8", b"0", b"200", b"GET", b"i8", b"0"], b"*2\r\n:-128\r\n:-56\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"SAT", b"SET", b"i8", b"0", b"200", b"GET", b"i8", b"0"], b"*2\r\n:-56\r\n:127\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"SAT", b"SET", b"u8", b"0", b"-1", b"GET", b"u8", b"0"], b"*2\r\n:127\r\n:255\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"FAIL", b"SET", b"u8", b"0", b"300", b"GET", b"u8", b"0"], b"*2\r\n$-1\r\n:255\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"WRAP", b"SET", b"u8", b"0", b"-1", b"GET", b"u8", b"0"], b"*2\r\n:255\r\n:255\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"SAT", b"INCRBY", b"u8", b"0", b"-1000", b"GET", b"u8", b"0"], b"*2\r\n:0\r\n:0\r\n"),
    (&[b"BITFIELD", b"bf"], b"*0\r\n"),
    (&[b"GET", b"bf"], b"$14\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x80\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"u64", b"0"], b"-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"i65", b"0"], b"-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"i0", b"0"], b"-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"x8", b"0"], b"-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"I8", b"0"], b"-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"u8", b"x"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"u8", b"-1"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"BITFIELD", b"bf", b"GET", b"u8", b"#x"], b"-ERR bit offset is not an integer or out of range\r\n"),
    (&[b"BITFIELD", b"bf", b"SET", b"u8", b"0", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"BITFIELD", b"bf", b"SET", b"u8", b"0"], b"-ERR syntax error\r\n"),
    (&[b"BITFIELD", b"bf", b"FOO"], b"-ERR syntax error\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW"], b"-ERR syntax error\r\n"),
    (&[b"BITFIELD", b"bf", b"OVERFLOW", b"FOO"], b"-ERR Invalid OVERFLOW type specified\r\n"),
    (&[b"BITFIELD", b"nbf", b"GET", b"u8", b"0", b"GET", b"i16", b"3"], b"*2\r\n:0\r\n:0\r\n"),
    (&[b"EXISTS", b"nbf"], b":0\r\n"),
    (&[b"BITFIELD", b"nbf", b"OVERFLOW", b"FAIL", b"INCRBY", b"u2", b"0", b"5"], b"*1\r\n$-1\r\n"),
    (&[b"EXISTS", b"nbf"], b":1\r\n"),
    (&[b"GET", b"nbf"], b"$1\r\n\x00\r\n"),
    (&[b"BITFIELD_RO", b"bf", b"GET", b"u8", b"0", b"GET", b"i4", b"#2"], b"*2\r\n:0\r\n:0\r\n"),
    (&[b"BITFIELD_RO", b"bf", b"SET", b"u8", b"0", b"1"], b"-ERR BITFIELD_RO only supports the GET subcommand\r\n"),
    (&[b"BITFIELD_RO", b"bf", b"GET", b"u8", b"0", b"INCRBY", b"u8", b"0", b"1"], b"-ERR BITFIELD_RO only supports the GET subcommand\r\n"),
    (&[b"BITFIELD_RO", b"bf", b"FOO"], b"-ERR syntax error\r\n"),
    (&[b"bitfield_ro", b"bf"], b"*0\r\n"),
    (&[b"SET", b"bft", b"x", b"EX", b"100"], b"+OK\r\n"),
    (&[b"BITFIELD", b"bft", b"SET", b"u8", b"0", b"65"], b"*1\r\n:120\r\n"),
    (&[b"TTL", b"bft"], b":100\r\n"),
    (&[b"GET", b"bft"], b"$1\r\nA\r\n"),
];

#[test]
fn string_and_bitmap_commands_as_redis_answers_them() {
    let mut e = engine();
    let mut s = resp2();
    for (args, want) in SCRIPT {
        let got = run_at(&mut e, &mut s, &command(args), now());
        assert_eq!(
            got,
            String::from_utf8_lossy(want),
            "{:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}

/// Where Redis's limit is 512 MB, memspin's is the item limit (`-I`, 1 MiB here): a bit
/// offset whose byte is past it is refused as Redis refuses one past 512 MB, and a value that
/// would outgrow it is refused as too large; nothing is stored.
#[test]
fn offsets_past_the_item_limit_are_refused() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    let offset = "ERR bit offset is not an integer or out of range";
    let large = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    let mib = 1 << 20;
    let bits = (mib * 8).to_string();
    let last_bit = (mib * 8 - 1).to_string();
    assert_eq!(c(&["SETBIT", "b", &bits, "1"]), format!("-{offset}\r\n"));
    assert_eq!(c(&["GETBIT", "b", &bits]), format!("-{offset}\r\n"));
    assert_eq!(
        c(&["BITFIELD", "b", "GET", "u8", &bits]),
        format!("-{offset}\r\n")
    );
    // The last byte under the limit is a valid offset, but the item (key and header
    // included) would not fit.
    assert_eq!(c(&["SETBIT", "b", &last_bit, "1"]), format!("-{large}\r\n"));
    let near = (mib * 8 - 64).to_string();
    assert_eq!(
        c(&["BITFIELD", "b", "SET", "u8", &near, "1"]),
        format!("-{large}\r\n")
    );
    assert_eq!(
        c(&["SETRANGE", "r", &mib.to_string(), "x"]),
        format!("-{large}\r\n")
    );
    assert_eq!(
        c(&["SETRANGE", "r", &(mib - 10).to_string(), "x"]),
        format!("-{large}\r\n")
    );
    assert_eq!(c(&["EXISTS", "b", "r"]), ":0\r\n");
    // Within the limit, a value grows to reach the offset.
    assert_eq!(c(&["SETRANGE", "r", "99999", "x"]), ":100000\r\n");
    assert_eq!(c(&["SETBIT", "b", "799999", "1"]), ":0\r\n");
    assert_eq!(c(&["STRLEN", "b"]), ":100000\r\n");
    assert_eq!(c(&["BITCOUNT", "b"]), ":1\r\n");
    assert_eq!(c(&["BITPOS", "b", "1"]), ":799999\r\n");
}

/// The read-modify-writes keep the key's expiry to the millisecond and a memcached item's
/// flags, as `INCR` does; `BITOP` stores its result afresh (no expiry), as Redis does.
#[test]
fn read_modify_writes_keep_expiry_and_flags() {
    let mut e = engine();
    let mut s = resp2();
    let mut text = Session::default();
    let mut out = Vec::new();
    e.execute(&mut text, b"set m 42 0 2\r\n10\r\n", &mut out, now());
    assert_eq!(out, b"STORED\r\n");
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    for (i, args) in [
        &["SETRANGE", "k", "1", "x"][..],
        &["SETBIT", "k", "3", "1"],
        &["INCRBYFLOAT", "n", "1.5"],
        &["BITFIELD", "k", "INCRBY", "u8", "0", "1"],
    ]
    .iter()
    .enumerate()
    {
        let key = args[1];
        let setup = if key == "n" { "1" } else { "abc" };
        assert_eq!(c(&["SET", key, setup, "PX", "123456"]), "+OK\r\n", "{i}");
        assert!(c(args).starts_with([':', '$', '*']), "{args:?}");
        assert_eq!(c(&["PTTL", key]), ":123456\r\n", "{args:?}");
    }
    assert_eq!(c(&["SETRANGE", "m", "0", "2"]), ":2\r\n");
    assert_eq!(c(&["INCRBYFLOAT", "m", "0.5"]), "$4\r\n20.5\r\n");
    let mut out = Vec::new();
    e.execute(&mut text, b"get m\r\n", &mut out, now());
    assert_eq!(out, b"VALUE m 42 4\r\n20.5\r\nEND\r\n");
}

/// `INCRBYFLOAT` prints as Redis's `%.17Lf` does for exact decimals: 17 decimals at most,
/// no trailing zeros, `-0` as `0`; an exponent is read; NaN, infinities and spaces refused.
#[test]
fn incrbyfloat_prints_as_redis() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    for (current, increment, want) in [
        ("0", "0.1", "0.1"),
        ("0.1", "0.2", "0.3"),
        ("1", "-1", "0"),
        ("-0.5", "0.5", "0"),
        ("1.5e3", "1", "1501"),
        ("0", "1e-17", "0.00000000000000001"),
        ("0", "1e-18", "0"),
        ("0", "6e-18", "0.00000000000000001"),
        ("0", "-6e-18", "-0.00000000000000001"),
        ("3.14159265358979323846", "0", "3.14159265358979324"),
        ("10", "-20.25", "-10.25"),
        ("99999999999999999999", "1", "100000000000000000000"),
    ] {
        assert_eq!(c(&["SET", "f", current]), "+OK\r\n");
        assert_eq!(
            c(&["INCRBYFLOAT", "f", increment]),
            format!("${}\r\n{want}\r\n", want.len()),
            "{current} + {increment}"
        );
        assert_eq!(c(&["GET", "f"]), format!("${}\r\n{want}\r\n", want.len()));
    }
    for bad in ["nan", " 1", "1 ", "", "1e", "0x10", "1,5"] {
        assert_eq!(
            c(&["INCRBYFLOAT", "f", bad]),
            "-ERR value is not a valid float\r\n",
            "{bad:?}"
        );
    }
    assert_eq!(c(&["SET", "f", "1e308"]), "+OK\r\n");
    assert_eq!(
        c(&["INCRBYFLOAT", "f", "1e308"]),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
}

/// In RESP3 `LCS ... IDX` is a map, as Redis answers it.
#[test]
fn lcs_idx_is_a_map_in_resp3() {
    let mut e = engine();
    let mut s = Session::speaking(Protocol::Resp(Version::Resp3));
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(c(&["SET", "a", "ohmytext"]), "+OK\r\n");
    assert_eq!(c(&["SET", "b", "mynewtext"]), "+OK\r\n");
    assert_eq!(
        c(&["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"]),
        "%2\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n\
         $3\r\nlen\r\n:6\r\n"
    );
}

/// `LCS`'s table is bounded by the item limit (4 bytes per pair of positions), as Redis
/// bounds it by `proto-max-bulk-len`.
#[test]
fn lcs_table_is_bounded_by_the_item_limit() {
    let mut e = engine();
    let mut s = resp2();
    let long = "x".repeat(600);
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(c(&["SET", "a", &long]), "+OK\r\n");
    assert_eq!(c(&["SET", "b", &long]), "+OK\r\n");
    assert_eq!(
        c(&["LCS", "a", "b", "LEN"]),
        "-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n"
    );
    assert_eq!(c(&["SET", "b", &long[..400]]), "+OK\r\n");
    assert_eq!(c(&["LCS", "a", "b", "LEN"]), ":400\r\n");
}

/// With two workers `BITOP` and `LCS` run where all their keys live, or are refused with
/// `CROSSSLOT` when the keys live on both; one-key commands go to their key's owner.
#[test]
fn bitop_and_lcs_keys_on_one_worker_or_crossslot() {
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    let owner_of = |key: &str| crate::engine::owner_hash(key.as_bytes()) % 2;
    let theirs: Vec<String> = (0..100)
        .map(|i| format!("k{i}"))
        .filter(|k| owner_of(k) == 1)
        .take(3)
        .collect();
    let mine = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| owner_of(k) == 0)
        .unwrap();
    let run = |home: &mut Engine, owner: &mut Engine, args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        run_on_two_workers(home, owner, &command(&args), false)
    };
    let (a, b, dest) = (theirs[0].as_str(), theirs[1].as_str(), theirs[2].as_str());
    assert_eq!(run(&mut home, &mut owner, &["SET", a, "foobar"]), "+OK\r\n");
    assert_eq!(run(&mut home, &mut owner, &["SET", b, "abcdef"]), "+OK\r\n");
    assert_eq!(
        run(&mut home, &mut owner, &["BITOP", "AND", dest, a, b]),
        ":6\r\n"
    );
    assert_eq!(
        run(&mut home, &mut owner, &["GET", dest]),
        "$6\r\n`bc`ab\r\n"
    );
    assert_eq!(run(&mut home, &mut owner, &["LCS", a, b, "LEN"]), ":1\r\n");
    assert_eq!(
        run(&mut home, &mut owner, &["SETBIT", a, "0", "1"]),
        ":0\r\n"
    );
    assert_eq!(run(&mut home, &mut owner, &["BITCOUNT", a]), ":27\r\n");
    let crossslot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    assert_eq!(
        run(&mut home, &mut owner, &["BITOP", "OR", &mine, a]),
        crossslot
    );
    assert_eq!(
        run(&mut home, &mut owner, &["BITOP", "OR", dest, a, &mine]),
        crossslot
    );
    assert_eq!(run(&mut home, &mut owner, &["LCS", a, &mine]), crossslot);
}

/// `BITCOUNT ... BIT` and `BITPOS` skip whole bytes where they can; over every range of a
/// value of mixed bytes they answer what a count or search bit by bit gives.
#[test]
fn bit_ranges_agree_with_a_walk_bit_by_bit() {
    let mut e = engine();
    let mut s = resp2();
    let value: Vec<u8> = (0..24u32)
        .map(|i| match i % 6 {
            0 => 0x00,
            1 => 0xff,
            2 => 0x80,
            3 => 0x01,
            4 => (i * 37) as u8,
            _ => 0xfe,
        })
        .collect();
    let set = command(&[b"SET", b"bits", &value]);
    assert_eq!(run_at(&mut e, &mut s, &set, now()), "+OK\r\n");
    let bit = |offset: usize| (value[offset / 8] >> (7 - offset % 8)) & 1;
    let total = value.len() as i64 * 8;
    let clamp = |i: i64| {
        if i < 0 {
            (i + total).max(0)
        } else {
            i.min(total - 1)
        }
    };
    for start in (-total - 3..total + 3).step_by(5) {
        for end in (-total - 3..total + 3).step_by(7) {
            let (from, to) = (clamp(start), clamp(end));
            let want_count = if start < 0 && end < 0 && start > end || from > to {
                0
            } else {
                (from..=to).filter(|&o| bit(o as usize) == 1).count()
            };
            let (a, b) = (start.to_string(), end.to_string());
            assert_eq!(
                call(&mut e, &mut s, &["BITCOUNT", "bits", &a, &b, "BIT"]),
                format!(":{want_count}\r\n"),
                "BITCOUNT {a} {b} BIT"
            );
            for wanted in [0u8, 1] {
                let found = if from > to {
                    -1
                } else {
                    (from..=to)
                        .find(|&o| bit(o as usize) == wanted)
                        .unwrap_or(-1)
                };
                assert_eq!(
                    call(
                        &mut e,
                        &mut s,
                        &["BITPOS", "bits", &wanted.to_string(), &a, &b, "BIT"]
                    ),
                    format!(":{found}\r\n"),
                    "BITPOS {wanted} {a} {b} BIT"
                );
            }
        }
    }
}
