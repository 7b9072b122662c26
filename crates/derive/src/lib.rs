//! `torchlight-derive`: `#[derive(Module)]`, which writes a model's `torchlight_nn::Module`
//! structure (kind, parameters, buffers, children) from its fields. Use it through
//! `torchlight_nn::Module` or `torchlight::nn::Module`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Fields, Ident, LitStr, Meta, Path, Type};

/// Implements `torchlight_nn::Module` for a struct from its fields; the forward pass stays
/// hand-written (`impl ModuleT`).
///
/// Fields become `state_dict` path segments, in declaration order:
///
/// - `#[param]` on a `Tensor` or `Option<Tensor>` field: a parameter (`nn.Parameter`); a
///   `None` is absent, like PyTorch's `bias=False`.
/// - `#[buffer]` on a `Tensor` or `Option<Tensor>` field: a buffer (`register_buffer`), such as
///   a running statistic. As in PyTorch, a module lists its parameters, then its buffers,
///   then its children.
/// - any other field is a child module: a type implementing `Module`, an `Option<M>` (absent
///   when `None`), or a `Vec<M>`, whose items are named `field.0`, `field.1`, ... (the keys of
///   PyTorch's `nn.ModuleList`; use `torchlight_nn::ModuleList` where the list itself must be a
///   module of its own).
/// - `#[module(skip)]`: plain data (sizes, configs), not part of the structure.
/// - `#[module(name = "...")]` on a field: its path segment, when it differs from the field's
///   name (e.g. a PyTorch name that is a Rust keyword).
///
/// On the struct, `#[module(kind = "...")]` sets `Module::kind` (default: the struct's name),
/// and `#[module(crate = "path")]` names the nn crate when it is reached some other way than
/// as `torchlight_nn` or `torchlight::nn`.
///
/// A runnable example is in `torchlight_nn`'s crate documentation; the shape of one:
///
/// ```text
/// use torchlight_nn::{Conv2d, Linear, Module, ModuleT};
///
/// #[derive(Debug, Module)]
/// struct Net {
///     conv: Conv2d,             // conv.weight, conv.bias
///     blocks: Vec<Block>,       // blocks.0.*, blocks.1.*
///     head: Option<Linear>,     // head.* when present
///     #[param]
///     scale: tch::Tensor,       // scale
///     #[buffer]
///     steps: tch::Tensor,       // steps
///     #[module(skip)]
///     width: i64,
/// }
/// ```
#[proc_macro_derive(Module, attributes(module, param, buffer))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// What a field is to the module.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    Param,
    Buffer,
    Child,
    Skip,
}

/// One field: how it is reached, its path segment and what it is.
struct FieldSpec<'a> {
    ident: &'a Ident,
    name: String,
    kind: FieldKind,
    ty: &'a Type,
}

/// The struct-level `#[module(...)]` settings.
#[derive(Default)]
struct StructAttrs {
    kind: Option<LitStr>,
    krate: Option<Path>,
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let attrs = struct_attrs(input)?;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => named.named.iter().collect(),
            Fields::Unit => Vec::new(),
            Fields::Unnamed(_) => {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "#[derive(Module)] needs named fields: their names become state_dict keys",
                ))
            }
        },
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "#[derive(Module)] works on structs; an enum has no fixed set of state_dict keys",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new(u.union_token.span, "#[derive(Module)] works on structs, not unions"))
        }
    };
    let mut specs: Vec<FieldSpec> = Vec::new();
    let mut errors: Option<syn::Error> = None;
    let mut push_error = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    for field in fields {
        match field_spec(field) {
            Ok(spec) => {
                if spec.kind != FieldKind::Skip {
                    if let Some(other) =
                        specs.iter().find(|s| s.kind != FieldKind::Skip && s.name == spec.name)
                    {
                        push_error(syn::Error::new(
                            spec.ident.span(),
                            format!(
                                "state_dict name `{}` is already taken by field `{}`; rename one with \
                                 #[module(name = \"...\")]",
                                spec.name, other.ident
                            ),
                        ));
                    }
                }
                specs.push(spec);
            }
            Err(e) => push_error(e),
        }
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    let krate = match attrs.krate {
        Some(path) => quote!(#path),
        None => nn_crate(),
    };
    let ident = &input.ident;
    let kind = match attrs.kind {
        Some(kind) => kind,
        None => LitStr::new(&ident.to_string(), ident.span()),
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();

    let tensor_calls: Vec<TokenStream2> = [FieldKind::Param, FieldKind::Buffer]
        .into_iter()
        .flat_map(|role| specs.iter().filter(move |s| s.kind == role))
        .map(|s| {
            let (field, name) = (s.ident, &s.name);
            let role = match s.kind {
                FieldKind::Param => quote!(#krate::Role::Parameter),
                _ => quote!(#krate::Role::Buffer),
            };
            quote_spanned! {s.ty.span()=>
                #krate::__derive::TensorField::push_tensor(&self.#field, #name, #role, &mut out);
            }
        })
        .collect();
    let children: Vec<&FieldSpec> = specs.iter().filter(|s| s.kind == FieldKind::Child).collect();
    let child_calls = children.iter().map(|s| {
        let (field, name) = (s.ident, &s.name);
        quote_spanned! {s.ty.span()=>
            #krate::__derive::ChildField::push_child(&self.#field, #name, &mut out);
        }
    });
    let child_mut_calls = children.iter().map(|s| {
        let (field, name) = (s.ident, &s.name);
        quote_spanned! {s.ty.span()=>
            #krate::__derive::ChildField::push_child_mut(&mut self.#field, #name, &mut out);
        }
    });

    let own_tensors = (!tensor_calls.is_empty()).then(|| {
        quote! {
            fn own_tensors(&self) -> ::std::vec::Vec<#krate::OwnTensor<'_>> {
                let mut out = ::std::vec::Vec::new();
                #(#tensor_calls)*
                out
            }
        }
    });
    let children_fns = (!children.is_empty()).then(|| {
        quote! {
            fn children(&self) -> ::std::vec::Vec<(::std::string::String, &dyn #krate::Module)> {
                let mut out = ::std::vec::Vec::new();
                #(#child_calls)*
                out
            }
            fn children_mut(
                &mut self,
            ) -> ::std::vec::Vec<(::std::string::String, &mut dyn #krate::Module)> {
                let mut out = ::std::vec::Vec::new();
                #(#child_mut_calls)*
                out
            }
        }
    });
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Module for #ident #ty_generics #where_clause {
            fn kind(&self) -> &'static str {
                #kind
            }
            #own_tensors
            #children_fns
            fn as_any(&self) -> &dyn ::std::any::Any {
                self
            }
            fn as_any_mut(&mut self) -> &mut dyn ::std::any::Any {
                self
            }
        }
    })
}

/// The path of torchlight-nn as the deriving crate sees it: `::torchlight_nn` (also inside
/// torchlight-nn, which names itself so), or `::torchlight::nn` through the facade.
fn nn_crate() -> TokenStream2 {
    let named = |name: String, suffix: TokenStream2| {
        let ident = Ident::new(&name.replace('-', "_"), Span::call_site());
        quote!(::#ident #suffix)
    };
    match crate_name("torchlight-nn") {
        Ok(FoundCrate::Name(name)) => named(name, quote!()),
        Ok(FoundCrate::Itself) => quote!(::torchlight_nn),
        Err(_) => match crate_name("torchlight") {
            Ok(FoundCrate::Name(name)) => named(name, quote!(::nn)),
            _ => quote!(::torchlight_nn),
        },
    }
}

fn struct_attrs(input: &DeriveInput) -> syn::Result<StructAttrs> {
    let mut out = StructAttrs::default();
    for attr in &input.attrs {
        if attr.path().is_ident("param") || attr.path().is_ident("buffer") {
            return Err(syn::Error::new(
                attr.path().span(),
                "#[param] and #[buffer] go on Tensor fields, not on the struct",
            ));
        }
        if !attr.path().is_ident("module") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("kind") {
                let kind: LitStr = meta.value()?.parse()?;
                if kind.value().is_empty() {
                    return Err(syn::Error::new(kind.span(), "the module kind must not be empty"));
                }
                if out.kind.replace(kind).is_some() {
                    return Err(meta.error("`kind` is given twice"));
                }
                Ok(())
            } else if meta.path.is_ident("crate") {
                let path: LitStr = meta.value()?.parse()?;
                out.krate = Some(path.parse()?);
                Ok(())
            } else if meta.path.is_ident("skip") || meta.path.is_ident("name") {
                Err(meta.error("`skip` and `name` go on fields: #[module(skip)], #[module(name = \"...\")]"))
            } else {
                Err(meta.error("unknown struct attribute: expected #[module(kind = \"...\")] or #[module(crate = \"...\")]"))
            }
        })?;
    }
    Ok(out)
}

fn field_spec(field: &syn::Field) -> syn::Result<FieldSpec<'_>> {
    let ident = field.ident.as_ref().expect("named fields");
    let mut kind: Option<(FieldKind, Span)> = None;
    let mut skip = false;
    let mut name: Option<LitStr> = None;
    for attr in &field.attrs {
        let role = if attr.path().is_ident("param") {
            FieldKind::Param
        } else if attr.path().is_ident("buffer") {
            FieldKind::Buffer
        } else if attr.path().is_ident("module") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip") {
                    if std::mem::replace(&mut skip, true) {
                        return Err(meta.error("`skip` is given twice"));
                    }
                    Ok(())
                } else if meta.path.is_ident("name") {
                    let value: LitStr = meta.value()?.parse()?;
                    check_name(&value)?;
                    if name.replace(value).is_some() {
                        return Err(meta.error("`name` is given twice"));
                    }
                    Ok(())
                } else if meta.path.is_ident("kind") || meta.path.is_ident("crate") {
                    Err(meta.error("`kind` and `crate` go on the struct, not on a field"))
                } else {
                    Err(meta.error(
                        "unknown field attribute: expected #[module(skip)] or #[module(name = \"...\")]",
                    ))
                }
            })?;
            continue;
        } else {
            continue;
        };
        if !matches!(attr.meta, Meta::Path(_)) {
            return Err(syn::Error::new(attr.meta.span(), "#[param] and #[buffer] take no arguments"));
        }
        if kind.replace((role, attr.path().span())).is_some() {
            return Err(syn::Error::new(
                attr.path().span(),
                "a tensor field is either #[param] or #[buffer], and says it once",
            ));
        }
    }
    let kind = match (kind, skip) {
        (Some((_, span)), true) => {
            return Err(syn::Error::new(
                span,
                "#[module(skip)] marks plain data: a skipped field cannot also be #[param] or #[buffer]",
            ))
        }
        (None, true) => {
            if let Some(name) = &name {
                return Err(syn::Error::new(
                    name.span(),
                    "a #[module(skip)] field has no state_dict name to set",
                ));
            }
            FieldKind::Skip
        }
        (Some((role, _)), false) => role,
        (None, false) => FieldKind::Child,
    };
    let name = match name {
        Some(name) => name.value(),
        None => ident.to_string().trim_start_matches("r#").to_string(),
    };
    Ok(FieldSpec { ident, name, kind, ty: &field.ty })
}

/// A path segment must be non-empty and free of `.`, the separator of state_dict keys (as
/// PyTorch's `register_module` requires).
fn check_name(name: &LitStr) -> syn::Result<()> {
    let value = name.value();
    if value.is_empty() {
        return Err(syn::Error::new(name.span(), "a state_dict name must not be empty"));
    }
    if value.contains('.') {
        return Err(syn::Error::new(
            name.span(),
            format!("state_dict name \"{value}\" contains `.`, the separator between path segments"),
        ));
    }
    Ok(())
}
