//! The names of nn's ops, one constant each: what an op reports in its traces and errors,
//! what the autocast tables ([`POLICIES`](crate::amp::POLICIES) and its siblings) list and
//! what nn-onnx's converter matches. Every one of those spells a name through these
//! constants, so a name typed wrong is a compile error, never an op that silently does not
//! cast or does not export.
//!
//! ```
//! use nn_core::amp::{policy, CastPolicy};
//! use nn_core::names;
//! use nn_core::Device;
//! assert_eq!(policy(Device::Cpu, names::LINEAR), Some(CastPolicy::Lower));
//! assert_eq!(names::SCALED_DOT_PRODUCT_ATTENTION, "scaled_dot_product_attention");
//! ```

/// `abs`.
pub const ABS: &str = "abs";
/// `adaptive_avg_pool2d`.
pub const ADAPTIVE_AVG_POOL2D: &str = "adaptive_avg_pool2d";
/// `add`.
pub const ADD: &str = "add";
/// `addmm`.
pub const ADDMM: &str = "addmm";
/// `affine`.
pub const AFFINE: &str = "affine";
/// `all`.
pub const ALL: &str = "all";
/// `amax`.
pub const AMAX: &str = "amax";
/// `amin`.
pub const AMIN: &str = "amin";
/// `any`.
pub const ANY: &str = "any";
/// `argmax`.
pub const ARGMAX: &str = "argmax";
/// `argmin`.
pub const ARGMIN: &str = "argmin";
/// `argsort`.
pub const ARGSORT: &str = "argsort";
/// `avg_pool2d`.
pub const AVG_POOL2D: &str = "avg_pool2d";
/// `avg_pool3d`.
pub const AVG_POOL3D: &str = "avg_pool3d";
/// `batch_norm`.
pub const BATCH_NORM: &str = "batch_norm";
/// `bilinear`.
pub const BILINEAR: &str = "bilinear";
/// `binary_cross_entropy_with_logits`.
pub const BINARY_CROSS_ENTROPY_WITH_LOGITS: &str = "binary_cross_entropy_with_logits";
/// `cat`.
pub const CAT: &str = "cat";
/// `clamp`.
pub const CLAMP: &str = "clamp";
/// `clamp_tensor`.
pub const CLAMP_TENSOR: &str = "clamp_tensor";
/// `clone`.
pub const CLONE: &str = "clone";
/// `contiguous`.
pub const CONTIGUOUS: &str = "contiguous";
/// `conv1d`.
pub const CONV1D: &str = "conv1d";
/// `conv2d`.
pub const CONV2D: &str = "conv2d";
/// `conv3d`.
pub const CONV3D: &str = "conv3d";
/// `conv_transpose1d`.
pub const CONV_TRANSPOSE1D: &str = "conv_transpose1d";
/// `conv_transpose2d`.
pub const CONV_TRANSPOSE2D: &str = "conv_transpose2d";
/// `cos`.
pub const COS: &str = "cos";
/// `cross_entropy`.
pub const CROSS_ENTROPY: &str = "cross_entropy";
/// `cumprod`.
pub const CUMPROD: &str = "cumprod";
/// `cumsum`.
pub const CUMSUM: &str = "cumsum";
/// `detach`.
pub const DETACH: &str = "detach";
/// `div`.
pub const DIV: &str = "div";
/// `div_scalar`.
pub const DIV_SCALAR: &str = "div_scalar";
/// `dropout`.
pub const DROPOUT: &str = "dropout";
/// `einsum`.
pub const EINSUM: &str = "einsum";
/// `embedding`.
pub const EMBEDDING: &str = "embedding";
/// `eq`.
pub const EQ: &str = "eq";
/// `erf`.
pub const ERF: &str = "erf";
/// `erfinv`.
pub const ERFINV: &str = "erfinv";
/// `exp`.
pub const EXP: &str = "exp";
/// `expand`.
pub const EXPAND: &str = "expand";
/// `flip`.
pub const FLIP: &str = "flip";
/// `gather`.
pub const GATHER: &str = "gather";
/// `ge`.
pub const GE: &str = "ge";
/// `gelu`.
pub const GELU: &str = "gelu";
/// `group_norm`.
pub const GROUP_NORM: &str = "group_norm";
/// `gt`.
pub const GT: &str = "gt";
/// `index_add`.
pub const INDEX_ADD: &str = "index_add";
/// `index_select`.
pub const INDEX_SELECT: &str = "index_select";
/// `interpolate`.
pub const INTERPOLATE: &str = "interpolate";
/// `isfinite`.
pub const ISFINITE: &str = "isfinite";
/// `isinf`.
pub const ISINF: &str = "isinf";
/// `isnan`.
pub const ISNAN: &str = "isnan";
/// `l1_loss`.
pub const L1_LOSS: &str = "l1_loss";
/// `layer_norm`.
pub const LAYER_NORM: &str = "layer_norm";
/// `le`.
pub const LE: &str = "le";
/// `leaky_relu`.
pub const LEAKY_RELU: &str = "leaky_relu";
/// `linear`.
pub const LINEAR: &str = "linear";
/// `log`.
pub const LOG: &str = "log";
/// `log_softmax`.
pub const LOG_SOFTMAX: &str = "log_softmax";
/// `logical_not`.
pub const LOGICAL_NOT: &str = "logical_not";
/// `logsumexp`.
pub const LOGSUMEXP: &str = "logsumexp";
/// `lt`.
pub const LT: &str = "lt";
/// `matmul`.
pub const MATMUL: &str = "matmul";
/// `max`.
pub const MAX: &str = "max";
/// `max_dim`.
pub const MAX_DIM: &str = "max_dim";
/// `max_pool2d`.
pub const MAX_POOL2D: &str = "max_pool2d";
/// `max_pool3d`.
pub const MAX_POOL3D: &str = "max_pool3d";
/// `max_pool2d_with_indices`.
pub const MAX_POOL2D_WITH_INDICES: &str = "max_pool2d_with_indices";
/// `maximum`.
pub const MAXIMUM: &str = "maximum";
/// `min`.
pub const MIN: &str = "min";
/// `min_dim`.
pub const MIN_DIM: &str = "min_dim";
/// `minimum`.
pub const MINIMUM: &str = "minimum";
/// `mean` (a composite: a sum and a division).
pub const MEAN: &str = "mean";
/// `mse_loss`.
pub const MSE_LOSS: &str = "mse_loss";
/// `mul`.
pub const MUL: &str = "mul";
/// `narrow`.
pub const NARROW: &str = "narrow";
/// `ne`.
pub const NE: &str = "ne";
/// `neg`.
pub const NEG: &str = "neg";
/// `nll_loss`.
pub const NLL_LOSS: &str = "nll_loss";
/// `norm`.
pub const NORM: &str = "norm";
/// `outer`.
pub const OUTER: &str = "outer";
/// `pad` in its constant and circular modes (a composite of `cat` and `narrow`).
pub const PAD: &str = "pad";
/// `permute`.
pub const PERMUTE: &str = "permute";
/// `pow`.
pub const POW: &str = "pow";
/// `powf`.
pub const POWF: &str = "powf";
/// `quantile`.
pub const QUANTILE: &str = "quantile";
/// `reciprocal`.
pub const RECIPROCAL: &str = "reciprocal";
/// `reflection_pad`.
pub const REFLECTION_PAD: &str = "reflection_pad";
/// `relu`.
pub const RELU: &str = "relu";
/// `replication_pad`.
pub const REPLICATION_PAD: &str = "replication_pad";
/// `reshape`.
pub const RESHAPE: &str = "reshape";
/// `rms_norm`.
pub const RMS_NORM: &str = "rms_norm";
/// `roll`.
pub const ROLL: &str = "roll";
/// `rsqrt`.
pub const RSQRT: &str = "rsqrt";
/// `scalar_div`.
pub const SCALAR_DIV: &str = "scalar_div";
/// `scaled_dot_product_attention`.
pub const SCALED_DOT_PRODUCT_ATTENTION: &str = "scaled_dot_product_attention";
/// `scatter_add`.
pub const SCATTER_ADD: &str = "scatter_add";
/// `sigmoid`.
pub const SIGMOID: &str = "sigmoid";
/// `silu`.
pub const SILU: &str = "silu";
/// `sin`.
pub const SIN: &str = "sin";
/// `snapshot`.
pub const SNAPSHOT: &str = "snapshot";
/// `softmax`.
pub const SOFTMAX: &str = "softmax";
/// `softplus`.
pub const SOFTPLUS: &str = "softplus";
/// `sort`.
pub const SORT: &str = "sort";
/// `sqrt`.
pub const SQRT: &str = "sqrt";
/// `square`.
pub const SQUARE: &str = "square";
/// `stack`.
pub const STACK: &str = "stack";
/// `sub`.
pub const SUB: &str = "sub";
/// `sum`.
pub const SUM: &str = "sum";
/// `tanh`.
pub const TANH: &str = "tanh";
/// `to_device`.
pub const TO_DEVICE: &str = "to_device";
/// `to_dtype`.
pub const TO_DTYPE: &str = "to_dtype";
/// `topk`.
pub const TOPK: &str = "topk";
/// `tril`.
pub const TRIL: &str = "tril";
/// `triu`.
pub const TRIU: &str = "triu";
/// `var` (a composite: a mean, a difference and a sum of squares).
pub const VAR: &str = "var";
/// `std` (the square root of [`VAR`], with PyTorch's gradient where it is 0).
pub const STD: &str = "std";
/// `where`.
pub const WHERE: &str = "where";
