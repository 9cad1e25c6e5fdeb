//! SPDY/3's header compression: one zlib stream per direction and connection, primed with
//! the dictionary of the SPDY/3 specification (section 2.6.10.1), each header block ending
//! at a sync flush.
//!
//! [`Inflater`] is a complete DEFLATE decoder (stored, fixed and dynamic Huffman blocks) that
//! keeps its 32 KiB window across header blocks. [`Deflater`] writes stored blocks only: a
//! valid zlib stream any peer reads, header blocks being a few hundred bytes at most, each
//! ending with the sync flush marker.

/// The words of the SPDY/3 dictionary, each written as a 4-byte big-endian length and the
/// word.
const WORDS: [&str; 67] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
    // Not words: the tail follows them as is (see `dictionary`).
    "",
    "",
];

/// The dictionary's tail, written without lengths after the words.
const TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00",
    " Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The SPDY/3 header dictionary.
pub(crate) fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1500);
    for w in WORDS.iter().filter(|w| !w.is_empty()) {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
}

/// Adler-32 (RFC 1950), the dictionary's identifier in a zlib header.
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// A malformed compressed header block.
#[derive(Debug, thiserror::Error)]
#[error("invalid compressed header block: {0}")]
pub(crate) struct InflateError(&'static str);

type Result<T> = std::result::Result<T, InflateError>;

const WINDOW: usize = 32 * 1024;
const MAX_OUTPUT: usize = 1024 * 1024;

/// The decompressing side of a connection's header stream.
pub(crate) struct Inflater {
    /// The output so far (the dictionary first), trimmed to the last window.
    history: Vec<u8>,
    dict_id: u32,
    header_read: bool,
}

struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    bit: u32,
    nbits: u32,
}

impl Bits<'_> {
    fn need(&mut self, n: u32) -> Result<u32> {
        while self.nbits < n {
            let b = *self
                .data
                .get(self.pos)
                .ok_or(InflateError("block ends early"))?;
            self.pos += 1;
            self.bit |= u32::from(b) << self.nbits;
            self.nbits += 8;
        }
        let v = self.bit & ((1u32 << n) - 1);
        self.bit >>= n;
        self.nbits -= n;
        Ok(v)
    }

    fn align(&mut self) {
        self.bit = 0;
        self.nbits = 0;
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A canonical Huffman code: how many codes of each length, and the symbols in code order.
struct Huffman {
    count: [u16; 16],
    symbol: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> Result<Huffman> {
        let mut count = [0u16; 16];
        for &l in lengths {
            count[usize::from(l)] += 1;
        }
        let mut offs = [0u16; 16];
        for len in 1..15 {
            offs[len + 1] = offs[len] + count[len];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                let o = &mut offs[usize::from(l)];
                *symbol
                    .get_mut(usize::from(*o))
                    .ok_or(InflateError("bad code lengths"))? = s as u16;
                *o += 1;
            }
        }
        count[0] = 0;
        Ok(Huffman { count, symbol })
    }

    fn decode(&self, bits: &mut Bits<'_>) -> Result<u16> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= bits.need(1)? as i32;
            let count = i32::from(self.count[len]);
            if code - count < first {
                return self
                    .symbol
                    .get((index + code - first) as usize)
                    .copied()
                    .ok_or(InflateError("bad code"));
            }
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
        Err(InflateError("bad code"))
    }
}

const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

impl Inflater {
    /// A decompressor primed with `dict`.
    pub(crate) fn new(dict: &[u8]) -> Inflater {
        Inflater {
            history: dict.to_vec(),
            dict_id: adler32(dict),
            header_read: false,
        }
    }

    /// Decompresses one header block (the zlib header with the first).
    pub(crate) fn inflate(&mut self, block: &[u8]) -> Result<Vec<u8>> {
        let mut data = block;
        if !self.header_read {
            let [cmf, flg, rest @ ..] = data else {
                return Err(InflateError("no zlib header"));
            };
            if cmf & 0x0f != 8 || (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 != 0 {
                return Err(InflateError("bad zlib header"));
            }
            data = rest;
            if flg & 0x20 != 0 {
                let id = data
                    .get(..4)
                    .ok_or(InflateError("no dictionary id"))?
                    .try_into()
                    .map(u32::from_be_bytes)
                    .map_err(|_| InflateError("no dictionary id"))?;
                if id != self.dict_id {
                    return Err(InflateError("not SPDY/3's dictionary"));
                }
                data = &data[4..];
            }
            self.header_read = true;
        }
        let start = self.history.len();
        let mut bits = Bits {
            data,
            pos: 0,
            bit: 0,
            nbits: 0,
        };
        while !bits.done() {
            let last = bits.need(1)?;
            match bits.need(2)? {
                0 => self.stored(&mut bits)?,
                1 => {
                    let (lit, dist) = fixed()?;
                    self.codes(&mut bits, &lit, &dist)?;
                }
                2 => {
                    let (lit, dist) = dynamic(&mut bits)?;
                    self.codes(&mut bits, &lit, &dist)?;
                }
                _ => return Err(InflateError("bad block type")),
            }
            if last == 1 {
                break;
            }
            if self.history.len() - start > MAX_OUTPUT {
                return Err(InflateError("header block too large"));
            }
        }
        let out = self.history[start..].to_vec();
        if self.history.len() > 2 * WINDOW {
            self.history.drain(..self.history.len() - WINDOW);
        }
        Ok(out)
    }

    fn stored(&mut self, bits: &mut Bits<'_>) -> Result<()> {
        bits.align();
        let head = bits
            .data
            .get(bits.pos..bits.pos + 4)
            .ok_or(InflateError("stored block ends early"))?;
        let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let nlen = u16::from_le_bytes([head[2], head[3]]);
        if len as u16 != !nlen {
            return Err(InflateError("stored block length"));
        }
        bits.pos += 4;
        let body = bits
            .data
            .get(bits.pos..bits.pos + len)
            .ok_or(InflateError("stored block ends early"))?;
        self.history.extend_from_slice(body);
        bits.pos += len;
        Ok(())
    }

    fn codes(&mut self, bits: &mut Bits<'_>, lit: &Huffman, dist: &Huffman) -> Result<()> {
        let mut produced = 0usize;
        loop {
            let sym = lit.decode(bits)?;
            match sym {
                0..=255 => {
                    self.history.push(sym as u8);
                    produced += 1;
                }
                256 => return Ok(()),
                _ => {
                    let i = usize::from(sym - 257);
                    let len = usize::from(*LEN_BASE.get(i).ok_or(InflateError("bad length"))?)
                        + bits.need(u32::from(LEN_EXTRA[i]))? as usize;
                    let d = usize::from(dist.decode(bits)?);
                    let back = usize::from(*DIST_BASE.get(d).ok_or(InflateError("bad distance"))?)
                        + bits.need(u32::from(DIST_EXTRA[d]))? as usize;
                    if back > self.history.len() {
                        return Err(InflateError("distance too far back"));
                    }
                    let from = self.history.len() - back;
                    for k in 0..len {
                        let b = self.history[from + k];
                        self.history.push(b);
                    }
                    produced += len;
                }
            }
            if produced > MAX_OUTPUT {
                return Err(InflateError("header block too large"));
            }
        }
    }
}

fn fixed() -> Result<(Huffman, Huffman)> {
    let mut l = [0u8; 288];
    l[..144].fill(8);
    l[144..256].fill(9);
    l[256..280].fill(7);
    l[280..].fill(8);
    Ok((Huffman::new(&l)?, Huffman::new(&[5u8; 30])?))
}

fn dynamic(bits: &mut Bits<'_>) -> Result<(Huffman, Huffman)> {
    let nlen = bits.need(5)? as usize + 257;
    let ndist = bits.need(5)? as usize + 1;
    let ncode = bits.need(4)? as usize + 4;
    if nlen > 286 || ndist > 30 {
        return Err(InflateError("bad counts"));
    }
    let mut cl = [0u8; 19];
    for &i in &CL_ORDER[..ncode] {
        cl[i] = bits.need(3)? as u8;
    }
    let clh = Huffman::new(&cl)?;
    let mut lengths = vec![0u8; nlen + ndist];
    let mut i = 0;
    while i < nlen + ndist {
        let sym = clh.decode(bits)?;
        let (value, repeat) = match sym {
            0..=15 => (sym as u8, 1),
            16 => {
                let prev = *lengths
                    .get(i.wrapping_sub(1))
                    .ok_or(InflateError("repeat with no previous length"))?;
                (prev, 3 + bits.need(2)? as usize)
            }
            17 => (0, 3 + bits.need(3)? as usize),
            _ => (0, 11 + bits.need(7)? as usize),
        };
        if i + repeat > nlen + ndist {
            return Err(InflateError("too many lengths"));
        }
        lengths[i..i + repeat].fill(value);
        i += repeat;
    }
    Ok((
        Huffman::new(&lengths[..nlen])?,
        Huffman::new(&lengths[nlen..])?,
    ))
}

/// The compressing side of a connection's header stream (stored blocks).
pub(crate) struct Deflater {
    dict_id: u32,
    header_written: bool,
}

impl Deflater {
    /// A compressor announcing `dict` (which stored blocks never reference).
    pub(crate) fn new(dict: &[u8]) -> Deflater {
        Deflater {
            dict_id: adler32(dict),
            header_written: false,
        }
    }

    /// One header block, ending at a block boundary as a sync flush does.
    pub(crate) fn deflate(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() + 16);
        if !self.header_written {
            // CMF: deflate, 32 KiB window; FLG: FDICT, check bits making it a multiple of 31.
            out.extend_from_slice(&[0x78, 0x20]);
            out.extend_from_slice(&self.dict_id.to_be_bytes());
            self.header_written = true;
        }
        for c in data.chunks(0xffff) {
            // BFINAL 0, BTYPE 00, padding to the byte.
            out.push(0);
            let len = c.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(c);
        }
        // The sync flush marker (an empty stored block): readers hand out what they decoded
        // when they reach it (Go's flate does not before).
        out.extend_from_slice(&[0, 0, 0, 0xff, 0xff]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b"enq=0."));
    }

    #[test]
    fn stored_blocks_round_trip_across_header_blocks() {
        let dict = dictionary();
        let mut de = Deflater::new(&dict);
        let mut inf = Inflater::new(&dict);
        let a = de.deflate(b"\0\0\0\x01\0\0\0\x04port\0\0\0\x0280");
        assert_eq!(a[..2], [0x78, 0x20]);
        assert_eq!(
            inf.inflate(&a).unwrap(),
            b"\0\0\0\x01\0\0\0\x04port\0\0\0\x0280"
        );
        let b = de.deflate(b"");
        assert_eq!(inf.inflate(&b).unwrap(), b"");
        let c = de.deflate(&[7u8; 70000]);
        assert_eq!(inf.inflate(&c).unwrap(), vec![7u8; 70000]);
    }

    /// Blocks zlib wrote (best compression, SPDY/3's dictionary, a sync flush after each),
    /// as a Go client's framer writes them: fixed and dynamic Huffman codes, references
    /// into the dictionary and into earlier blocks.
    #[test]
    fn zlib_blocks_with_the_dictionary_inflate() {
        let mut inf = Inflater::new(&dictionary());
        let h1 = b"\0\0\0\x03\0\0\0\x0astreamtype\0\0\0\x05error\0\0\0\x04port\0\0\0\x0280\0\0\0\x09requestid\0\0\0\x010";
        let h2 = b"\0\0\0\x03\0\0\0\x0astreamtype\0\0\0\x04data\0\0\0\x04port\0\0\0\x0280\0\0\0\x09requestid\0\0\0\x010";
        assert_eq!(inf.inflate(&unhex("78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45a024cc64610024398b209198094adc8c0600000000ffff")).unwrap(), h1);
        assert_eq!(
            inf.inflate(&unhex("c2aa15540a2512d209000000ffff")).unwrap(),
            h2
        );
        let big = concat!(
            "6260646266616563e7e0e4e2e6e1e5e3171014121611151397909492969195935750545256515553",
            "d7d0d4d2d6d1d5d307a66d63135333730b4b2b6b1b5b3b7b07472767175737770f4f2f6f1f5f3fff",
            "80c0a0e090d0b0f088c8a8e898d8b8f884c4a4646088a467646665e7e4e6e5171416159794969557",
            "545655d7d4d6d537343635b7b4b6b577747675f7f4f6f54f983869f294a9d3a6cf98396bf69cb9f3",
            "e62f58b868f192a5cb96af58b96af59ab5ebd66fd8b869f396addbb6efd8b96bf79ebdfbf61f3878",
            "e8f091a3c78e9f3879eaf499b3e7ce5fb878e9f295abd7aedfb879ebf69dbbf7ee3f78f8e8f193a7",
            "cf9ebf78f9eaf59bb7efde7ff8f8e9f397afdfbefff8f9ebf79fbffffe8ffa7fd4ffa3fe1ff5ffa8",
            "ff47fd3feaff51ff8ffa7fd4ffa3fe1ff5ffa8ff47fd3feaff51ff8ffa7fd4ffa3fe1ff5ffa8ff47",
            "fd3feaff51ff8ffa7fd4ffa3fe1ff5ffa8ff47fd3feaff51ff8ffa7fd4ffa3fe1ff5ffa8ff47fd3f",
            "14fd8f583138ca1a658db2862b0b000000ffff",
        );
        let mut want: Vec<u8> = (0..=255u8).cycle().take(256 * 40).collect();
        want.extend(b"streamtype".repeat(100));
        assert_eq!(inf.inflate(&unhex(big)).unwrap(), want);
        assert!(Inflater::new(b"other").inflate(&unhex("78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45a024cc64610024398b209198094adc8c0600000000ffff")).is_err());
    }
}
