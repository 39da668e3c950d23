//! Building ONNX protobuf messages: tensors, attributes, nodes, value infos.

use nn_core::{DType, Tensor};

use crate::onnx_pb as pb;
use crate::Error;

/// ONNX's element type code for an nn dtype.
pub(crate) fn elem_type(d: DType) -> Result<i32, Error> {
    use pb::tensor_proto::DataType as T;
    Ok(match d {
        DType::F32 => T::Float,
        DType::F64 => T::Double,
        DType::F16 => T::Float16,
        DType::BF16 => T::Bfloat16,
        DType::I64 => T::Int64,
        DType::Bool => T::Bool,
        #[allow(unreachable_patterns)]
        other => return Err(Error::Model(format!("tensors of dtype {other} have no ONNX export"))),
    } as i32)
}

/// The little-endian bytes ONNX's `raw_data` holds for `t`'s values.
fn raw_bytes(t: &Tensor) -> Result<Vec<u8>, Error> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec_of::<f32>().iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F64 => t.to_vec_of::<f64>().iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => t.to_vec_of::<half::f16>().iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        DType::BF16 => t.to_vec_of::<half::bf16>().iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        DType::I64 => t.to_vec_of::<i64>().iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::Bool => t.to_vec_of::<bool>().iter().map(|&v| v as u8).collect(),
        #[allow(unreachable_patterns)]
        other => return Err(Error::Model(format!("tensors of dtype {other} have no ONNX export"))),
    })
}

/// A named tensor holding `t`'s values.
pub(crate) fn tensor(name: &str, t: &Tensor) -> Result<pb::TensorProto, Error> {
    if t.device() != nn_core::Device::Cpu {
        return Err(Error::Model(format!(
            "tensor `{name}` of shape {:?} is on {}: only values on the CPU can be written; move the model with \
             `to_device(Device::Cpu)` (a model on the meta device has no values to export)",
            t.shape(),
            t.device()
        )));
    }
    Ok(pb::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(elem_type(t.dtype())?),
        raw_data: Some(raw_bytes(t)?),
        ..Default::default()
    })
}

/// A 1-D `int64` tensor.
pub(crate) fn i64s(values: &[i64]) -> pb::TensorProto {
    pb::TensorProto {
        dims: vec![values.len() as i64],
        data_type: Some(pb::tensor_proto::DataType::Int64 as i32),
        raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

/// A 0-d `int64` tensor.
pub(crate) fn i64_scalar(v: i64) -> pb::TensorProto {
    pb::TensorProto { dims: vec![], ..i64s(&[v]) }
}

/// A 0-d tensor holding `v` as `dtype`.
pub(crate) fn scalar(v: f64, dtype: DType) -> Result<pb::TensorProto, Error> {
    let t = Tensor::full_on(&[], v, dtype, nn_core::Device::Cpu);
    tensor("", &t).map(|mut p| {
        p.name = None;
        p
    })
}

/// Attribute constructors.
pub(crate) mod attr {
    use super::pb;
    use pb::attribute_proto::AttributeType as A;

    fn base(name: &str, ty: A) -> pb::AttributeProto {
        pb::AttributeProto { name: Some(name.to_string()), r#type: Some(ty as i32), ..Default::default() }
    }

    pub(crate) fn int(name: &str, v: i64) -> pb::AttributeProto {
        pb::AttributeProto { i: Some(v), ..base(name, A::Int) }
    }

    pub(crate) fn ints(name: &str, v: &[i64]) -> pb::AttributeProto {
        pb::AttributeProto { ints: v.to_vec(), ..base(name, A::Ints) }
    }

    pub(crate) fn float(name: &str, v: f64) -> pb::AttributeProto {
        pb::AttributeProto { f: Some(v as f32), ..base(name, A::Float) }
    }

    pub(crate) fn tensor(name: &str, t: pb::TensorProto) -> pb::AttributeProto {
        pb::AttributeProto { t: Some(t), ..base(name, A::Tensor) }
    }
}

/// One dim of a value's declared shape.
pub(crate) enum DimSpec {
    Fixed(usize),
    Named(String),
}

/// A graph input or output declaration.
pub(crate) fn value_info(name: &str, dtype: DType, dims: &[DimSpec]) -> Result<pb::ValueInfoProto, Error> {
    use pb::tensor_shape_proto::dimension::Value;
    let dim = dims
        .iter()
        .map(|d| pb::tensor_shape_proto::Dimension {
            value: Some(match d {
                DimSpec::Fixed(n) => Value::DimValue(*n as i64),
                DimSpec::Named(s) => Value::DimParam(s.clone()),
            }),
            ..Default::default()
        })
        .collect();
    Ok(pb::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem_type(dtype)?),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    })
}
