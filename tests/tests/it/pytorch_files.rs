//! `StateDict::load_pytorch`: PyTorch's zip files as torch.save writes them (fixtures from
//! `fixtures/pytorch/torch_files.py`), the files it refuses by name, crafted pickles that
//! try the unpickler's limits, and a mutation fuzzer over the fixtures' pickles that must
//! never panic.

use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use nn_core::{DType, Module, StateDict, Tensor};
use nn_layers::{BatchNorm1d, Linear, Sequential};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/pickle").join(name)
}

fn reference() -> StateDict {
    StateDict::load(fixture("reference.safetensors")).unwrap()
}

fn assert_same(got: &Tensor, want: &Tensor, name: &str) {
    assert_eq!(got.shape(), want.shape(), "{name}");
    assert_eq!(got.dtype(), want.dtype(), "{name}");
    let bits = |t: &Tensor| t.to_dtype(DType::F64).to_vec_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want), "{name}");
}

#[test]
fn every_storage_type_view_and_tie_loads_as_pytorch_saved_it() {
    let want = reference();
    for file in ["state_dict.pt", "state_dict_p4.pt"] {
        let sd = StateDict::load_pytorch(fixture(file)).unwrap();
        assert_eq!(sd.len(), 18, "{file}");
        for (name, t) in sd.iter() {
            assert_same(t, want.get(name).unwrap(), &format!("{file}: {name}"));
        }
        assert_eq!(sd.get("bf16").unwrap().dtype(), DType::BF16, "kept in its dtype");
        assert_eq!(sd.get("i32").unwrap().dtype(), DType::I64, "narrow integers widen");
        assert_eq!(sd.get("scalar").unwrap().shape(), &[] as &[usize]);
        assert_eq!(sd.get("empty").unwrap().shape(), &[0, 4]);
        let (a, b) = (sd.get("tied.a").unwrap(), sd.get("tied.b").unwrap());
        assert!(a.is_alias_of(b), "{file}: one tensor under two names, as PyTorch saved it");
        assert!(!sd.get("view.t").unwrap().is_alias_of(sd.get("view.rows").unwrap()), "other views are copies");
    }
}

#[test]
fn a_modules_state_dict_loads_strictly_into_the_same_model() {
    let sd = StateDict::load_pytorch(fixture("module.pt")).unwrap();
    let want = reference();
    assert_eq!(sd.len(), 7);
    // The OrderedDict's `_metadata`: each module's `_version` (BatchNorm's is 2), which load
    // pre-hooks receive.
    assert_eq!(sd.versions().collect::<Vec<_>>(), [("", 1), ("0", 1), ("1", 2)]);
    for (name, t) in sd.iter() {
        assert_same(t, want.get(&format!("module.{name}")).unwrap(), name);
    }
    let mut m = Sequential::new().add(Linear::new(3, 2)).add(BatchNorm1d::new(2));
    m.load_state_dict(&sd, true).unwrap();
    assert_eq!(m.state_dict().get("1.num_batches_tracked").unwrap().to_vec_i64(), vec![1]);
}

fn refusal(file: &str) -> String {
    StateDict::load_pytorch(fixture(file)).unwrap_err().to_string()
}

#[test]
fn code_other_formats_and_non_state_dicts_are_refused_by_name() {
    let e = refusal("eval.pt");
    assert!(
        e.contains("eval.pt") && e.contains("the global `__builtin__.eval` is not in the tensor-rebuild set"),
        "{e}"
    );
    let e = refusal("legacy.pt");
    assert!(e.contains("legacy format of PyTorch before 1.6"), "{e}");
    let e = refusal("nested.pt");
    assert!(e.contains("entry `model` is a dict, not a tensor"), "{e}");
    let e = refusal("scripted.pt");
    assert!(e.contains("TorchScript archive"), "{e}");
    let e = refusal("deflated.pt");
    assert!(e.contains("is compressed (Deflated): PyTorch stores its entries uncompressed"), "{e}");
    let e = refusal("reference.safetensors");
    assert!(e.contains("not a zip archive"), "{e}");
}

#[test]
fn a_fifo_a_device_and_a_directory_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.pt");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (path, want) in
        [(fifo, "(a FIFO)"), ("/dev/zero".into(), "(a character device)"), (dir.path().into(), "(a directory)")]
    {
        let e = StateDict::load_pytorch(&path).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn every_truncation_and_a_flipped_bit_are_errors() {
    let bytes = std::fs::read(fixture("state_dict.pt")).unwrap();
    for n in 0..bytes.len() {
        assert!(StateDict::from_pytorch_bytes(&bytes[..n]).is_err(), "the first {n} bytes loaded");
    }
    // A bit flipped inside a storage's bytes: the entry's CRC catches it.
    let (pkl, storages) = unpack(&bytes);
    let mut s = storages.clone();
    s[0].1[1] ^= 0x10;
    let mut forged = pack(&pkl, &s);
    // Re-packing computes a fresh CRC; put the original one back, as a corrupted disk would.
    let e = {
        let original = zip_crcs(&bytes);
        patch_crcs(&mut forged, &original);
        StateDict::from_pytorch_bytes(&forged).unwrap_err().to_string()
    };
    assert!(e.contains("fails its CRC-32 check"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Archives built here: a pickle and its storages
// ---------------------------------------------------------------------------------------

/// Storages by key, with their bytes.
type Storages = Vec<(String, Vec<u8>)>;

/// The `data.pkl` and the storages (`data/<key>`, in archive order) of a torch.save file.
fn unpack(bytes: &[u8]) -> (Vec<u8>, Storages) {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut pkl = Vec::new();
    let mut storages = Vec::new();
    for i in 0..z.len() {
        let mut f = z.by_index(i).unwrap();
        let name = f.name().unwrap().to_string();
        let mut data = Vec::new();
        f.read_to_end(&mut data).unwrap();
        if name.ends_with("/data.pkl") {
            pkl = data;
        } else if let Some((_, key)) = name.split_once("/data/") {
            storages.push((key.to_string(), data));
        }
    }
    (pkl, storages)
}

/// An archive as torch.save lays it out (`archive/data.pkl`, `archive/byteorder`,
/// `archive/data/<key>`), entries stored.
fn pack(pkl: &[u8], storages: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut w = zip::ZipWriter::new(&mut out);
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        w.start_file("archive/data.pkl", opts).unwrap();
        w.write_all(pkl).unwrap();
        w.start_file("archive/byteorder", opts).unwrap();
        w.write_all(b"little").unwrap();
        for (key, data) in storages {
            w.start_file(format!("archive/data/{key}"), opts).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
    }
    out.into_inner()
}

fn zip_crcs(bytes: &[u8]) -> Vec<(String, u32)> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..z.len())
        .map(|i| {
            let f = z.by_index_raw(i).unwrap();
            (f.name().unwrap().rsplit_once("/data/").map_or(String::new(), |(_, k)| k.to_string()), f.crc32())
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Writes the storages' original CRCs into both headers of a re-packed archive.
fn patch_crcs(bytes: &mut [u8], crcs: &[(String, u32)]) {
    let fresh = zip_crcs(bytes);
    for ((k, new), (k2, old)) in fresh.iter().zip(crcs) {
        assert_eq!(k, k2);
        let (new, old) = (new.to_le_bytes(), old.to_le_bytes());
        let mut i = 0;
        while i + 4 <= bytes.len() {
            if bytes[i..i + 4] == new {
                bytes[i..i + 4].copy_from_slice(&old);
            }
            i += 1;
        }
    }
}

/// A pickle written by hand, protocol 2.
struct Pickle(Vec<u8>);

impl Pickle {
    fn new() -> Pickle {
        Pickle(vec![0x80, 2])
    }
    fn op(mut self, b: &[u8]) -> Pickle {
        self.0.extend_from_slice(b);
        self
    }
    fn str(self, s: &str) -> Pickle {
        let mut p = self.op(b"X").op(&(s.len() as u32).to_le_bytes());
        p.0.extend_from_slice(s.as_bytes());
        p
    }
    fn int(self, i: i32) -> Pickle {
        self.op(b"J").op(&i.to_le_bytes())
    }
    fn global(self, module: &str, name: &str) -> Pickle {
        self.op(format!("c{module}\n{name}\n").as_bytes())
    }
    /// `_rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), offset, size, stride, False, {})`.
    fn tensor(self, key: &str, numel: i32, offset: i32, size: &[i32], stride: &[i32]) -> Pickle {
        let mut p = self.global("torch._utils", "_rebuild_tensor_v2").op(b"((").str("storage");
        p = p.global("torch", "FloatStorage").str(key).str("cpu").int(numel).op(b"tQ").int(offset).op(b"(");
        for &d in size {
            p = p.int(d);
        }
        p = p.op(b"t(");
        for &d in stride {
            p = p.int(d);
        }
        p.op(b"t\x89}tR")
    }
    fn end(self) -> Vec<u8> {
        self.op(b".").0
    }
}

fn floats(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

fn load(pkl: Vec<u8>, storages: &[(&str, usize)]) -> Result<StateDict, String> {
    let storages: Vec<(String, Vec<u8>)> = storages.iter().map(|&(k, n)| (k.to_string(), floats(n))).collect();
    StateDict::from_pytorch_bytes(&pack(&pkl, &storages)).map_err(|e| e.to_string())
}

#[test]
fn a_hand_written_pickle_loads_and_its_views_read_the_storage() {
    let pkl = Pickle::new()
        .op(b"}(")
        .str("w")
        .tensor("0", 6, 0, &[2, 3], &[3, 1])
        .str("col")
        .tensor("0", 6, 1, &[2], &[3])
        .op(b"u")
        .end();
    let sd = load(pkl, &[("0", 6)]).unwrap();
    assert_eq!(sd.get("w").unwrap().to_vec(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(sd.get("col").unwrap().to_vec(), vec![1.0, 4.0]);
}

#[test]
fn crafted_pickles_are_refused_naming_what_is_wrong() {
    let one = |t: Pickle| Pickle::new().op(b"}(").str("w").op(&t.0).op(b"u").end();
    // (pickle, storages by key and element count, what the error must say)
    type Case<'a> = (Vec<u8>, Vec<(&'a str, usize)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            one(Pickle(vec![]).tensor("0", 4, 0, &[5], &[1])),
            vec![("0", 4)],
            "reads element 4 of storage `0`, which has 4",
        ),
        (one(Pickle(vec![]).tensor("0", 4, 3, &[2], &[1])), vec![("0", 4)], "at offset 3 reads element 4"),
        (one(Pickle(vec![]).tensor("0", 4, 0, &[4], &[1])), vec![("0", 3)], "has 12 bytes, where its 4 elements"),
        (
            one(Pickle(vec![]).tensor("1", 4, 0, &[4], &[1])),
            vec![("0", 4)],
            "storage `archive/data/1`, which is not in the archive",
        ),
        (
            one(Pickle(vec![]).tensor("../x", 4, 0, &[4], &[1])),
            vec![("0", 4)],
            "storage key \"../x\" is not a plain name",
        ),
        (one(Pickle(vec![]).tensor("0", 4, 0, &[-1], &[1])), vec![("0", 4)], "the size has the entry -1"),
        (
            one(Pickle(vec![]).tensor("0", 4, 0, &[1 << 30, 1 << 30, 1 << 30], &[0, 0, 0])),
            vec![("0", 4)],
            "whose extent overflows",
        ),
        (
            Pickle::new()
                .op(b"}(")
                .str("w")
                .tensor("0", 4, 0, &[4], &[1])
                .str("w")
                .tensor("0", 4, 0, &[4], &[1])
                .op(b"u")
                .end(),
            vec![("0", 4)],
            "the name `w` is in the dict twice",
        ),
        (
            Pickle::new().op(b"}(").int(3).tensor("0", 4, 0, &[4], &[1]).op(b"u").end(),
            vec![("0", 4)],
            "a key of the dict is a int",
        ),
        (Pickle::new().op(b"}(").str("w").int(3).op(b"u").end(), vec![], "entry `w` is a int, not a tensor"),
        (Pickle::new().global("os", "system").str("ls").op(b"\x85R").end(), vec![], "the global `os.system`"),
        (Pickle::new().op(b"(").global("os", "system").op(b"o").end(), vec![], "the global `os.system`"),
        (Pickle::new().op(b"}(").op(b"i").end(), vec![], "the opcode INST is outside the tensor-rebuild set"),
        (Pickle::new().op(b"}").str("x").op(b"\x81").end(), vec![], "the opcode NEWOBJ"),
        (Pickle::new().op(b"}(").str("w").op(b"u").end(), vec![], "SETITEMS with an odd number of items"),
        (Pickle::new().op(b"}h\x07").end(), vec![], "memo entry 7 is read before it is written"),
        (Pickle::new().op(b"}").end()[..3].to_vec(), vec![], "the pickle ends without STOP"),
        (Pickle::new().op(b"}.}").0, vec![], "1 bytes follow the STOP opcode"),
        (Pickle::new().op(b"X\xff\xff\xff\x7f").end(), vec![], "2147483647 bytes asked for"),
        (Pickle::new().op(b"\x8a\x09").end(), vec![], "a LONG1 of 9 bytes"),
        (vec![0x80, 9, b'}', b'.'], vec![], "pickle protocol 9"),
        (Pickle::new().op(b"0").end(), vec![], "an opcode pops an empty stack"),
        (Pickle::new().op(b"N(0").end(), vec![], "an opcode pops past a MARK"),
        (Pickle::new().op(b"N").end(), vec![], "holds a None, not a state dict"),
        // The OrderedDict's attributes: `_metadata` must be PyTorch's `{path: {"version": n}}`.
        (
            Pickle::new().op(b"}").op(b"}(").str("_metadata").int(3).op(b"ub").end(),
            vec![],
            "`_metadata` is a int, not a dict",
        ),
        (
            Pickle::new().op(b"}").op(b"}(").str("_metadata").op(b"}(").str("a").int(1).op(b"uub").end(),
            vec![],
            "`_metadata` for `a` is a int, not a dict",
        ),
        (
            Pickle::new()
                .op(b"}")
                .op(b"}(")
                .str("_metadata")
                .op(b"}(")
                .str("a")
                .op(b"}(")
                .str("version")
                .int(-1)
                .op(b"uuub")
                .end(),
            vec![],
            "`_metadata` gives `a` the version -1, outside u32's range",
        ),
    ];
    for (pkl, storages, want) in cases {
        let e = load(pkl, &storages).unwrap_err();
        assert!(e.contains(want), "expected {want:?} in: {e}");
        assert!(e.contains("`<memory>` is not a PyTorch state dict nn can read"), "{e}");
    }
}

#[test]
fn views_copying_more_than_the_file_are_refused_and_a_memo_bomb_costs_nothing() {
    // Many strided views of one 1 MiB storage: each a copy, together far more than the file.
    let mut p = Pickle::new().op(b"}(");
    for i in 0..40 {
        p = p.str(&format!("v{i}")).tensor("0", 1 << 18, i, &[1 << 16], &[2]);
    }
    let e = load(p.op(b"u").end(), &[("0", 1 << 18)]).unwrap_err();
    assert!(e.contains("strided views copy more than twice the file's bytes"), "{e}");

    // A tuple of itself twice, 80 levels deep: 2^80 items were it copied, one Rc here.
    let mut p = Pickle::new().op(b"Nq\x000");
    for _ in 0..80 {
        p = p.op(b"h\x00h\x00\x86q\x000");
    }
    let e = load(p.op(b"h\x00").end(), &[]).unwrap_err();
    assert!(e.contains("holds a tuple"), "{e}");
}

// ---------------------------------------------------------------------------------------
// The fuzzer
// ---------------------------------------------------------------------------------------

/// xorshift64*: a deterministic stream for the mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Opcodes and arguments worth splicing into a pickle.
const TOKENS: &[&[u8]] = &[
    b"(",
    b"t",
    b"u",
    b"s",
    b"R",
    b"Q",
    b"b",
    b"}",
    b"]",
    b")",
    b"N",
    b"\x85",
    b"\x86",
    b"\x87",
    b"h\x00",
    b"q\x00",
    b"K\xff",
    b"J\xff\xff\xff\xff",
    b"\x88",
    b"\x89",
    b"e",
    b"a",
    b"0",
    b"\x94",
    b"\x93",
    b"ctorch\nFloatStorage\n",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"ccollections\nOrderedDict\n",
    b"X\x01\x00\x00\x00a",
    b"\x8a\x08",
];

fn mutate(pkl: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(pkl.len() + 1);
        match rng.below(5) {
            0 if !pkl.is_empty() => {
                let i = at.min(pkl.len() - 1);
                pkl[i] ^= 1 << rng.below(8);
            }
            1 if !pkl.is_empty() => {
                let i = at.min(pkl.len() - 1);
                pkl[i] = rng.next() as u8;
            }
            2 => {
                let end = (at + 1 + rng.below(8)).min(pkl.len());
                pkl.drain(at.min(end)..end);
            }
            3 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                pkl.splice(at..at, t.iter().copied());
            }
            _ => {
                // Repeat a slice of the pickle elsewhere in it.
                let (a, b) = (rng.below(pkl.len() + 1), rng.below(pkl.len() + 1));
                let piece: Vec<u8> = pkl[a.min(b)..a.max(b)].iter().take(64).copied().collect();
                pkl.splice(at..at, piece);
            }
        }
    }
}

#[test]
fn mutated_pickles_are_loaded_or_refused_never_a_panic() {
    let cases: usize = std::env::var("NN_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let seeds: Vec<(Vec<u8>, Storages)> = ["state_dict.pt", "state_dict_p4.pt", "module.pt"]
        .iter()
        .map(|f| unpack(&std::fs::read(fixture(f)).unwrap()))
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut loaded, mut refused) = (0, 0);
    for case in 0..cases {
        let (pkl, storages) = &seeds[case % seeds.len()];
        let mut pkl = pkl.clone();
        mutate(&mut pkl, &mut rng);
        let bytes = pack(&pkl, storages);
        match catch_unwind(AssertUnwindSafe(|| StateDict::from_pytorch_bytes(&bytes))) {
            Ok(Ok(_)) => loaded += 1,
            Ok(Err(e)) => {
                refused += 1;
                let msg = e.to_string();
                assert!(msg.len() < 64 << 10, "case {case}: a {}-byte message", msg.len());
            }
            Err(_) => {
                let path = std::env::temp_dir().join(format!("nn-pickle-fuzz-{case}.pt"));
                std::fs::write(&path, &bytes).unwrap();
                panic!("case {case} panicked; its archive is at {}", path.display());
            }
        }
    }
    assert!(refused > cases / 2 && loaded > 0, "{loaded} loaded, {refused} refused: the mutations reach both sides");
}
