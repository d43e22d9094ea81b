//! The policy file as written: serde structs with spans, before validation.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSpec {
    pub(super) failure_mode: Option<Spanned<String>>,
    pub(super) headers: Option<bool>,
    pub(super) trusted_proxies: Option<Spanned<StrList>>,
    pub(super) client_ip_header: Option<Spanned<String>>,
    pub(super) status: Option<StatusSpec>,
    pub(super) key_text: Option<KeyTextSpec>,
    #[serde(default)]
    pub(super) zones: BTreeMap<Spanned<String>, Spanned<ZoneSpec>>,
    #[serde(default)]
    pub(super) classes: BTreeMap<Spanned<String>, Spanned<ClassSpec>>,
    #[serde(default)]
    pub(super) exempt: BTreeMap<Spanned<String>, Spanned<ClassSpec>>,
    #[serde(default)]
    pub(super) limit: Vec<Spanned<LimitSpec>>,
}

/// `[status]`: what the JSON status shows (docs/METRICS.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatusSpec {
    pub(super) clients: Option<Spanned<String>>,
    pub(super) top_keys: Option<bool>,
}

/// `[key_text]`: how keys are written everywhere (docs/METRICS.md, "Key text").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyTextSpec {
    pub(super) hide: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ZoneSpec {
    #[allow(dead_code)]
    pub(super) description: Option<String>,
    pub(super) size: Spanned<Scalar>,
    pub(super) algorithm: Spanned<String>,
    pub(super) rate: Option<Spanned<String>>,
    pub(super) events: Option<Spanned<i64>>,
    pub(super) window: Option<Spanned<Scalar>>,
    /// A number, or `"auto"` (learned; `bounds`).
    pub(super) max: Option<Spanned<Scalar>>,
    pub(super) bounds: Option<Spanned<Vec<Spanned<i64>>>>,
    pub(super) reserve: Option<Spanned<i64>>,
    pub(super) lease: Option<Spanned<Scalar>>,
    // Cluster scope (docs/CLUSTER.md).
    pub(super) scope: Option<Spanned<String>>,
    pub(super) redis: Option<Spanned<StrList>>,
    pub(super) redis_mode: Option<Spanned<String>>,
    pub(super) sentinel_master: Option<Spanned<String>>,
    pub(super) tls_ca_file: Option<Spanned<String>>,
    pub(super) tls_cert_file: Option<Spanned<String>>,
    pub(super) tls_key_file: Option<Spanned<String>>,
    pub(super) password: Option<Spanned<String>>,
    pub(super) sync_interval: Option<Spanned<Scalar>>,
    pub(super) expected_nodes: Option<Spanned<i64>>,
    pub(super) fallback: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClassSpec {
    #[allow(dead_code)]
    pub(super) description: Option<String>,
    #[serde(rename = "match")]
    pub(super) shapes: Spanned<Vec<Spanned<ShapeSpec>>>,
    pub(super) lane: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShapeSpec {
    pub(super) method: Option<Spanned<StrList>>,
    pub(super) path: Option<Spanned<StrList>>,
    pub(super) path_prefix: Option<Spanned<StrList>>,
    pub(super) path_glob: Option<Spanned<StrList>>,
    pub(super) path_iglob: Option<Spanned<StrList>>,
    pub(super) path_regex: Option<Spanned<StrList>>,
    pub(super) query: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    pub(super) header: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    pub(super) cookie: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    pub(super) var: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    pub(super) client: Option<Spanned<StrList>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ValueSpec {
    pub(super) present: Option<bool>,
    pub(super) equals: Option<Spanned<String>>,
    pub(super) glob: Option<Spanned<String>>,
    pub(super) iglob: Option<Spanned<String>>,
    pub(super) regex: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitSpec {
    pub(super) name: Option<Spanned<String>>,
    pub(super) class: Spanned<StrList>,
    pub(super) zone: Spanned<String>,
    pub(super) key: Option<Spanned<StrList>>,
    pub(super) ipv4_prefix: Option<Spanned<i64>>,
    pub(super) ipv6_prefix: Option<Spanned<i64>>,
    pub(super) burst: Option<Spanned<i64>>,
    pub(super) delay: Option<Spanned<i64>>,
    pub(super) nodelay: Option<Spanned<bool>>,
    pub(super) dry_run: Option<bool>,
    pub(super) status: Option<Spanned<i64>>,
    pub(super) log_level: Option<Spanned<String>>,
    pub(super) cost: Option<Spanned<i64>>,
    pub(super) max: Option<Spanned<i64>>,
    pub(super) queue: Option<Spanned<i64>>,
    pub(super) timeout: Option<Spanned<Scalar>>,
    pub(super) ban: Option<Spanned<BanSpec>>,
    pub(super) lane: Option<Spanned<String>>,
    pub(super) charge_on_status: Option<Spanned<Vec<Spanned<i64>>>>,
}

/// `ban = { after = N, within = "1m", duration = "10m" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BanSpec {
    pub(super) after: Spanned<i64>,
    pub(super) within: Spanned<Scalar>,
    pub(super) duration: Spanned<Scalar>,
}

/// A string or an array of strings; array items keep their own span.
pub(super) struct StrList(pub(super) Vec<(String, Option<Range<usize>>)>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrList, E> {
                Ok(StrList(vec![(v.to_owned(), None)]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrList, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<Spanned<String>>()? {
                    let span = s.span();
                    out.push((s.into_inner(), Some(span)));
                }
                Ok(StrList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string or an integer (sizes, durations).
pub(super) enum Scalar {
    Str(String),
    Int(i64),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom("number too large"))
            }
        }
        d.deserialize_any(V)
    }
}
