//! ResNet (torchvision's `resnet18`, `resnet34`, `resnet50`, ...): the same constructor
//! arguments, module tree and state-dict keys (`conv1.weight`, `layer1.0.bn1.running_mean`,
//! `layer2.0.downsample.0.weight`, `fc.bias`), so a torchvision state dict saved as
//! safetensors loads strictly.
//!
//! Reads like torchvision's `resnet.py`: the two blocks, then the network.

use std::path::Path;

use nn_core::init::{self, FanMode, Nonlinearity};
use nn_core::prelude::*;
use nn_layers::{AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dConfig, Linear, MaxPool2d, Sequential};

use crate::error::{Error, Result};

/// A convolution without bias, initialised as torchvision does
/// (`kaiming_normal_(mode="fan_out", nonlinearity="relu")`).
fn conv(in_c: usize, out_c: usize, kernel: usize, stride: usize) -> Conv2d {
    let c = Conv2d::with_config(
        in_c,
        out_c,
        kernel,
        Conv2dConfig { stride, padding: kernel / 2, bias: false, ..Default::default() },
    );
    init::kaiming_normal_(&c.weight, FanMode::FanOut, Nonlinearity::Relu);
    c
}

/// The shortcut when a block changes shape: a strided 1x1 convolution and its batch norm
/// (keys `downsample.0.weight`, `downsample.1.*`).
fn downsample(in_c: usize, out_c: usize, stride: usize) -> Sequential {
    Sequential::new().add(conv(in_c, out_c, 1, stride)).add(BatchNorm2d::new(out_c))
}

/// The two-convolution block of ResNet-18 and -34 (expansion 1).
///
/// Keys: `conv1.weight`, `bn1.*`, `conv2.weight`, `bn2.*`, and `downsample.{0,1}.*` when
/// the block changes shape.
#[derive(Module)]
pub struct BasicBlock {
    /// 3x3, strided.
    #[module]
    pub conv1: Conv2d,
    /// After `conv1`.
    #[module]
    pub bn1: BatchNorm2d,
    /// 3x3.
    #[module]
    pub conv2: Conv2d,
    /// After `conv2`.
    #[module]
    pub bn2: BatchNorm2d,
    /// The shortcut's projection, where the shape changes.
    #[module]
    pub downsample: Option<Sequential>,
    #[base]
    base: ModuleBase,
}

impl Compute for BasicBlock {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let h = self.bn1.forward(&self.conv1.forward(x)).relu();
        let h = self.bn2.forward(&self.conv2.forward(&h));
        let shortcut = self.downsample.as_ref().map_or_else(|| x.clone(), |d| d.forward(x));
        (&h + &shortcut).relu()
    }
}

/// The bottleneck block of ResNet-50 and deeper (1x1, strided 3x3, 1x1 to four times the
/// width; torchvision's "ResNet V1.5", the stride on the 3x3).
///
/// Keys: `conv1`-`conv3.weight`, `bn1`-`bn3.*`, and `downsample.{0,1}.*`.
#[derive(Module)]
pub struct Bottleneck {
    /// 1x1 to the width.
    #[module]
    pub conv1: Conv2d,
    /// After `conv1`.
    #[module]
    pub bn1: BatchNorm2d,
    /// 3x3, strided.
    #[module]
    pub conv2: Conv2d,
    /// After `conv2`.
    #[module]
    pub bn2: BatchNorm2d,
    /// 1x1 to four times the width.
    #[module]
    pub conv3: Conv2d,
    /// After `conv3`.
    #[module]
    pub bn3: BatchNorm2d,
    /// The shortcut's projection, where the shape changes.
    #[module]
    pub downsample: Option<Sequential>,
    #[base]
    base: ModuleBase,
}

impl Compute for Bottleneck {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let h = self.bn1.forward(&self.conv1.forward(x)).relu();
        let h = self.bn2.forward(&self.conv2.forward(&h)).relu();
        let h = self.bn3.forward(&self.conv3.forward(&h));
        let shortcut = self.downsample.as_ref().map_or_else(|| x.clone(), |d| d.forward(x));
        (&h + &shortcut).relu()
    }
}

/// Which block a [`ResNet`] stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// [`BasicBlock`] (ResNet-18, -34).
    Basic,
    /// [`Bottleneck`] (ResNet-50, -101, -152).
    Bottleneck,
}

/// torchvision's `ResNet`: a 7x7 stem, four stages of blocks, average pooling and a linear
/// classifier. Input `[N, 3, H, W]`, output logits `[N, num_classes]`.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_models::resnet::ResNet;
///
/// let mut net = ResNet::resnet18(10);
/// net.eval();
/// assert_eq!(net.num_parameters(), 11_181_642); // torchvision's resnet18(num_classes=10)
/// assert_eq!(net.forward(&Tensor::randn(&[1, 3, 32, 32])).shape(), &[1, 10]);
/// assert!(net.state_dict().contains_key("layer2.0.downsample.1.running_var"));
/// ```
#[derive(Module)]
pub struct ResNet {
    /// 7x7, stride 2, 64 channels.
    #[module]
    pub conv1: Conv2d,
    /// After the stem.
    #[module]
    pub bn1: BatchNorm2d,
    /// 3x3, stride 2.
    #[module]
    pub maxpool: MaxPool2d,
    /// 64 wide, stride 1: a `Sequential` of blocks, as in torchvision (keys `layer1.N.*`).
    #[module]
    pub layer1: Sequential,
    /// 128 wide, stride 2.
    #[module]
    pub layer2: Sequential,
    /// 256 wide, stride 2.
    #[module]
    pub layer3: Sequential,
    /// 512 wide, stride 2.
    #[module]
    pub layer4: Sequential,
    /// To 1x1.
    #[module]
    pub avgpool: AdaptiveAvgPool2d,
    /// `[num_classes, 512 * expansion]`.
    #[module]
    pub fc: Linear,
    #[base]
    base: ModuleBase,
}

impl ResNet {
    /// torchvision's `ResNet(block, layers, num_classes)` (groups 1, width 64, no
    /// zero-initialised residuals), with its initialisation.
    pub fn new(block: Block, layers: [usize; 4], num_classes: usize) -> Self {
        let expansion = if block == Block::Basic { 1 } else { 4 };
        let mut inplanes = 64;
        let mut stage = |planes: usize, blocks: usize, stride: usize| -> Sequential {
            let mut seq = Sequential::new();
            for i in 0..blocks {
                let st = if i == 0 { stride } else { 1 };
                let shortcut =
                    (st != 1 || inplanes != planes * expansion).then(|| downsample(inplanes, planes * expansion, st));
                seq = match block {
                    Block::Basic => seq.add(BasicBlock {
                        conv1: conv(inplanes, planes, 3, st),
                        bn1: BatchNorm2d::new(planes),
                        conv2: conv(planes, planes, 3, 1),
                        bn2: BatchNorm2d::new(planes),
                        downsample: shortcut,
                        base: ModuleBase::default(),
                    }),
                    Block::Bottleneck => seq.add(Bottleneck {
                        conv1: conv(inplanes, planes, 1, 1),
                        bn1: BatchNorm2d::new(planes),
                        conv2: conv(planes, planes, 3, st),
                        bn2: BatchNorm2d::new(planes),
                        conv3: conv(planes, planes * 4, 1, 1),
                        bn3: BatchNorm2d::new(planes * 4),
                        downsample: shortcut,
                        base: ModuleBase::default(),
                    }),
                };
                inplanes = planes * expansion;
            }
            seq
        };
        let (layer1, layer2, layer3, layer4) =
            (stage(64, layers[0], 1), stage(128, layers[1], 2), stage(256, layers[2], 2), stage(512, layers[3], 2));
        ResNet {
            conv1: conv(3, 64, 7, 2),
            bn1: BatchNorm2d::new(64),
            maxpool: MaxPool2d::with_options(3, 2, 1, 1, false),
            layer1,
            layer2,
            layer3,
            layer4,
            avgpool: AdaptiveAvgPool2d::new((1, 1)),
            fc: Linear::new(512 * expansion, num_classes),
            base: ModuleBase::default(),
        }
    }

    /// `torchvision.models.resnet18(num_classes=...)`.
    pub fn resnet18(num_classes: usize) -> Self {
        ResNet::new(Block::Basic, [2, 2, 2, 2], num_classes)
    }

    /// `torchvision.models.resnet34(num_classes=...)`.
    pub fn resnet34(num_classes: usize) -> Self {
        ResNet::new(Block::Basic, [3, 4, 6, 3], num_classes)
    }

    /// `torchvision.models.resnet50(num_classes=...)`.
    pub fn resnet50(num_classes: usize) -> Self {
        ResNet::new(Block::Bottleneck, [3, 4, 6, 3], num_classes)
    }

    /// Builds with `build` on the meta device and loads a torchvision state dict saved as
    /// safetensors (`safetensors.torch.save_file(model.state_dict(), path)`), strictly; the
    /// model is in evaluation mode.
    ///
    /// # Errors
    /// [`Error::Weights`] naming every key that does not fit (the architecture's other
    /// depth, another class count), [`Error::MissingWeights`] for a missing file.
    pub fn from_safetensors(path: impl AsRef<Path>, build: impl FnOnce() -> ResNet) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::MissingWeights { dir: path.to_path_buf() });
        }
        crate::pretrained::load_weights(path, build, |w| w, &crate::pretrained::LoadOptions::f32())
    }
}

impl Compute for ResNet {
    /// `[N, 3, H, W]`.
    type Input = Tensor;
    /// `[N, num_classes]`.
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let h = self.maxpool.forward(&self.bn1.forward(&self.conv1.forward(x)).relu());
        let h = [&self.layer1, &self.layer2, &self.layer3, &self.layer4].iter().fold(h, |h, stage| stage.forward(&h));
        self.fc.forward(&self.avgpool.forward(&h).flatten(1, -1))
    }
}
