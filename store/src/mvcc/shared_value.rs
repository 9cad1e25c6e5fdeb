//! Values that share the memory of the Raft entry they came from.
//!
//! A write's value arrives inside an encoded Raft entry, which the in-memory log keeps until
//! the next snapshot; decoding copies it out. When the value is most of the entry, the state
//! machine keeps a slice of the entry instead of the copy, so the bytes are held once, not
//! twice (the entry's few other bytes stay alive with the value).

use bytes::Bytes;

/// Candidate positions checked before giving up and copying.
const MAX_CANDIDATES: usize = 4;
/// Protobuf tag of `PutRequest.value` (field 2, length-delimited).
const VALUE_TAG: u8 = 0x12;

/// `value` as a slice of `src`, the encoded entry it was decoded from (where it is encoded as
/// a protobuf bytes field with `PutRequest.value`'s tag), when it is at least half of `src`.
pub(super) fn find(src: &Bytes, value: &[u8]) -> Option<Bytes> {
    let n = value.len();
    if n == 0 || n * 2 < src.len() || n > src.len() {
        return None;
    }
    let mut prefix = vec![VALUE_TAG];
    let mut len = n as u64;
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            prefix.push(byte);
            break;
        }
        prefix.push(byte | 0x80);
    }
    let p = prefix.len();
    let mut checked = 0;
    let last = src.len().checked_sub(n + p)?;
    for at in 0..=last {
        if src.get(at..at + p) != Some(prefix.as_slice()) {
            continue;
        }
        let start = at + p;
        if src.get(start..start + n) == Some(value) {
            return Some(src.slice(start..start + n));
        }
        checked += 1;
        if checked >= MAX_CANDIDATES {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn share(source: Option<&Bytes>, value: Vec<u8>) -> Bytes {
        source
            .and_then(|src| find(src, &value))
            .unwrap_or_else(|| Bytes::from(value))
    }

    #[test]
    fn a_large_value_is_a_slice_of_its_entry() {
        let value = vec![b'x'; 300];
        let req = crate::pb::PbPutRequest {
            key: b"/registry/k".to_vec(),
            value: value.clone(),
            ..Default::default()
        };
        let src = Bytes::from(req.encode_to_vec());
        let shared = share(Some(&src), value.clone());
        assert_eq!(shared.as_ref(), value.as_slice());
        let inside = src.as_ptr() as usize..src.as_ptr() as usize + src.len();
        assert!(inside.contains(&(shared.as_ptr() as usize)));
        // A small value is copied, and so is one that is not in the source.
        let small = share(Some(&src), b"v".to_vec());
        assert!(!inside.contains(&(small.as_ptr() as usize)));
        assert_eq!(
            share(Some(&src), vec![b'y'; 300]).as_ref(),
            &[b'y'; 300][..]
        );
        assert_eq!(share(None, value.clone()).as_ref(), value.as_slice());
    }
}
