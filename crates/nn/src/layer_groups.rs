//! Layer ids for layer-wise lr decay: timm's `group_matcher(coarse=False)` of each built-in
//! family, written for torchvision's `state_dict` keys, numbered as timm's
//! `group_with_matcher` numbers them.

/// How an architecture numbers its parameters' layers for layer-wise lr decay: given every
/// parameter name in `state_dict` order, the layer id of each (same indices), from 0 at the
/// input side to the largest id at the output side (normally the head), consecutive.
pub type LayerGroupsFn = fn(names: &[&str]) -> Vec<usize>;

/// timm's `MATCH_PREV_GROUP`: an ordinal ending in it joins the layer just below it.
const MATCH_PREV: u64 = 99999;

/// timm's `group_with_matcher(..., reverse=True)`: each name's ordinal (a tuple, compared as
/// Python compares tuples; `None` for a name no rule matches, timm's `(inf,)`, which sorts
/// last), the distinct ordinals sorted and numbered from 0, except that an ordinal ending in
/// [`MATCH_PREV`] takes the number of the one before it.
fn number_ordinals(names: &[&str], ordinal: impl Fn(&str) -> Option<Vec<u64>>) -> Vec<usize> {
    let ordinals: Vec<Vec<u64>> =
        names.iter().map(|n| ordinal(n).unwrap_or_else(|| vec![u64::MAX])).collect();
    let mut distinct = ordinals.clone();
    distinct.sort();
    distinct.dedup();
    let mut ids = Vec::with_capacity(distinct.len());
    let mut id: Option<usize> = None;
    for o in &distinct {
        id = match id {
            Some(i) if o.last() == Some(&MATCH_PREV) => Some(i),
            Some(i) => Some(i + 1),
            None => Some(0),
        };
        ids.push(id.unwrap_or(0));
    }
    ordinals.iter().map(|o| ids[distinct.binary_search(o).expect("every ordinal is listed")]).collect()
}

/// The `index`-th dotted part of `name` as a number.
fn part(name: &str, index: usize) -> Option<u64> {
    name.split('.').nth(index)?.parse().ok()
}

/// ResNets, timm's `ResNet.group_matcher`: `stem=^conv1|bn1|maxpool`,
/// `blocks=^layer(\d+)\.(\d+)`; the head (`fc`) on top. One layer per residual block
/// (resnet18: 10 layers).
pub fn resnet_layer_ids(names: &[&str]) -> Vec<usize> {
    number_ordinals(names, |n| {
        if n.starts_with("conv1") || n.starts_with("bn1") {
            return Some(vec![0]);
        }
        let stage = n.strip_prefix("layer")?.split('.').next()?.parse().ok()?;
        Some(vec![1, stage, part(n, 1)?])
    })
}

/// MobileNetV2, timm's `mobilenetv2_100` (timm's `EfficientNet` class): the stem
/// (`features.0`, timm's `conv_stem`/`bn1`) is layer 0, each inverted residual
/// (`features.1` ... `features.17`, timm's `blocks.S.B` in the same order) a layer, the last
/// 1x1 convolution (`features.18`, timm's `conv_head`/`bn2`) joins the last block
/// (`MATCH_PREV_GROUP`), the classifier on top (19 layers).
pub fn mobilenet_v2_layer_ids(names: &[&str]) -> Vec<usize> {
    let last = last_feature(names);
    number_ordinals(names, |n| match feature_index(n)? {
        0 => Some(vec![0]),
        i if Some(i) == last => Some(vec![1, MATCH_PREV]),
        i => Some(vec![1, i]),
    })
}

/// MobileNetV3, timm's `MobileNetV3.group_matcher` (`stem=^conv_stem|bn1`,
/// `blocks=^blocks\.(\d+)\.(\d+)`): the stem (`features.0`) is layer 0, each later
/// `features.N` a layer (the last, the 1x1 convolution to 576/960 channels, is timm's last
/// block `blocks.5.0`/`blocks.6.0`), and the classifier (its first Linear is timm's
/// unmatched `conv_head`) on top (mobilenet_v3_small: 14 layers).
pub fn mobilenet_v3_layer_ids(names: &[&str]) -> Vec<usize> {
    number_ordinals(names, |n| match feature_index(n)? {
        0 => Some(vec![0]),
        i => Some(vec![1, i]),
    })
}

/// EfficientNet B0-B3 and V2, timm's `EfficientNet.group_matcher`: the stem (`features.0`)
/// is layer 0, each MBConv/FusedMBConv block `features.S.B` (timm's `blocks.{S-1}.B`) a
/// layer, the last 1x1 convolution (the last `features.N`, timm's `conv_head`/`bn2`) joins
/// the last block (`MATCH_PREV_GROUP`), the classifier on top (efficientnet_b0: 18 layers).
pub fn efficientnet_layer_ids(names: &[&str]) -> Vec<usize> {
    let last = last_feature(names);
    number_ordinals(names, |n| match feature_index(n)? {
        0 => Some(vec![0]),
        i if Some(i) == last => Some(vec![1, MATCH_PREV]),
        i => Some(vec![1, i, part(n, 2)?]),
    })
}

/// ConvNeXt, timm's `ConvNeXt.group_matcher`: the stem (`features.0`, timm's `stem`) is
/// layer 0, each block (`features.{2k+1}.B`, timm's `stages.k.blocks.B`) a layer, each
/// downsampling (`features.{2k}` for k >= 1, timm's `stages.k.downsample`, ordinal
/// `(k, 0)`) in the layer of its stage's first block, the classifier (timm's `head`) on top
/// (convnext_tiny: 20 layers).
pub fn convnext_layer_ids(names: &[&str]) -> Vec<usize> {
    number_ordinals(names, |n| match feature_index(n)? {
        0 => Some(vec![0]),
        i if i % 2 == 0 => Some(vec![1, i / 2, 0]),
        i => Some(vec![1, i / 2, part(n, 2)?]),
    })
}

/// Vision Transformers, timm's `VisionTransformer.group_matcher`: the class token, patch
/// embedding and position embedding (`class_token`, `conv_proj`, `encoder.pos_embedding`;
/// timm's `cls_token`, `patch_embed`, `pos_embed`) are layer 0, encoder block `i` is layer
/// `i + 1`, the final norm (`encoder.ln`, timm's `norm`) joins the last block
/// (`MATCH_PREV_GROUP`), the head on top (ViT-B/16: 14 layers).
pub fn vit_layer_ids(names: &[&str]) -> Vec<usize> {
    number_ordinals(names, |n| {
        if n.starts_with("class_token")
            || n.starts_with("conv_proj")
            || n.starts_with("encoder.pos_embedding")
        {
            Some(vec![0])
        } else if let Some(rest) = n.strip_prefix("encoder.layers.encoder_layer_") {
            Some(vec![1, rest.split('.').next()?.parse().ok()?])
        } else if n.starts_with("encoder.ln") {
            Some(vec![1, MATCH_PREV])
        } else {
            None
        }
    })
}

/// `N` of a `features.N.*` key.
fn feature_index(name: &str) -> Option<u64> {
    name.strip_prefix("features.").and(part(name, 1))
}

/// The largest `N` of the `features.N.*` keys.
fn last_feature(names: &[&str]) -> Option<u64> {
    names.iter().filter_map(|n| feature_index(n)).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_numbered_in_order_with_match_prev_joining_below_and_unmatched_on_top() {
        let names = ["b", "a", "head", "norm", "c"];
        let ids = number_ordinals(&names, |n| match n {
            "a" => Some(vec![0]),
            "b" => Some(vec![1, 5]),
            "c" => Some(vec![1, 7, 2]),
            "norm" => Some(vec![1, MATCH_PREV]),
            _ => None,
        });
        // (0,) < (1, 5) < (1, 7, 2) < (1, 99999) joins (1, 7, 2) < (inf,).
        assert_eq!(ids, [1, 0, 3, 2, 2]);
        assert!(number_ordinals(&[], |_| None).is_empty());
        assert_eq!(number_ordinals(&["x", "y"], |_| None), [0, 0], "all unmatched: one layer");
    }

    #[test]
    fn resnet_blocks_are_layers() {
        let names = [
            "conv1.weight",
            "bn1.bias",
            "layer1.0.conv1.weight",
            "layer1.1.bn2.weight",
            "layer2.0.downsample.0.weight",
            "fc.bias",
        ];
        assert_eq!(resnet_layer_ids(&names), [0, 0, 1, 2, 3, 4]);
    }
}
