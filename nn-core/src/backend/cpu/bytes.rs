//! The CPU buffers' little-endian encoding, for saving.

use half::{bf16, f16};

use super::CpuStorage;
use crate::shape::Layout;

/// The elements `l` selects, row-major, little-endian (the safetensors encoding): what
/// [`write_le`] streams, collected.
pub(crate) fn le_bytes(c: &CpuStorage, l: &Layout) -> Vec<u8> {
    let mut out = Vec::with_capacity(l.numel() * c.dtype().size_in_bytes());
    write_le(c, l, &mut out).expect("writing into a Vec cannot fail");
    out
}

/// Streams the elements `l` selects, row-major, little-endian, into `w`, a chunk at a time
/// (no copy of the whole tensor; a strided view is gathered first).
pub(crate) fn write_le(c: &CpuStorage, l: &Layout, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let gathered;
    let (c, range) = match l.contiguous_range() {
        Some(r) => (c, r),
        None => {
            gathered = c.gather_layout(l);
            (&gathered, 0..l.numel())
        }
    };
    match c {
        CpuStorage::F32(v) => stream(&v[range], f32::to_le_bytes, w),
        CpuStorage::F64(v) => stream(&v[range], f64::to_le_bytes, w),
        CpuStorage::I64(v) => stream(&v[range], i64::to_le_bytes, w),
        CpuStorage::F16(v) => stream(&v[range], |x: f16| x.to_bits().to_le_bytes(), w),
        CpuStorage::BF16(v) => stream(&v[range], |x: bf16| x.to_bits().to_le_bytes(), w),
        CpuStorage::Bool(v) => encode_chunks(&v[range], |b: bool| [u8::from(b)], w),
    }
}

/// Types whose in-memory bytes on a little-endian target are their encoding (no padding,
/// every bit pattern meaningful): written straight from the buffer, without a copy.
///
/// # Safety
/// Implementors must be plain numbers of `N` bytes with no padding.
unsafe trait RawLe<const N: usize>: Copy {}
// SAFETY: plain numbers without padding.
unsafe impl RawLe<4> for f32 {}
// SAFETY: as above.
unsafe impl RawLe<8> for f64 {}
// SAFETY: as above.
unsafe impl RawLe<8> for i64 {}
// SAFETY: as above (a 16-bit pattern).
unsafe impl RawLe<2> for f16 {}
// SAFETY: as above.
unsafe impl RawLe<2> for bf16 {}

/// Writes `v` with `encode` per element, or (little-endian targets, types whose memory is
/// their encoding) straight from memory: saving 64 MB copied every byte once more through
/// the chunk buffer.
fn stream<const N: usize, T: RawLe<N>>(
    v: &[T],
    encode: impl Fn(T) -> [u8; N],
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    if cfg!(target_endian = "little") {
        // SAFETY: `T` is a plain number type without padding (`RawLe`), so its
        // `size_of_val(v)` bytes are initialized; on a little-endian target they are
        // its little-endian encoding.
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) };
        return w.write_all(bytes);
    }
    encode_chunks(v, encode, w)
}

/// Elements per chunk of [`write_le`]: 1 MiB of `f32`.
const CHUNK: usize = 1 << 18;

fn encode_chunks<const N: usize, T: Copy>(
    v: &[T],
    f: impl Fn(T) -> [u8; N],
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK.min(v.len()) * N];
    for chunk in v.chunks(CHUNK) {
        let out = &mut buf[..chunk.len() * N];
        for (o, &x) in out.chunks_exact_mut(N).zip(chunk) {
            o.copy_from_slice(&f(x));
        }
        w.write_all(out)?;
    }
    Ok(())
}
