//! The safetensors JSON header, by the `safetensors` crate's rules.

use crate::{invalid, Result, TensorSpan, MAX_JSON_NESTING};

/// The tensors of a safetensors preamble (length + JSON) whose data region is `data_len` bytes.
pub(crate) fn spans(preamble: &[u8], data_len: u64) -> Result<Vec<TensorSpan>> {
    let json = preamble
        .get(8..)
        .ok_or_else(|| invalid("safetensors header truncated"))?;
    check_nesting(json)?;
    let meta = metadata(json)?;
    let base = preamble.len() as u64;
    let names = meta.offset_keys();
    let mut spans = Vec::with_capacity(names.len());
    for name in names {
        let info = meta.info(&name).expect("a name the metadata listed");
        let (s, e) = info.data_offsets;
        spans.push(TensorSpan {
            dtype_bits: info.dtype.bitsize(),
            dtype: format!("{:?}", info.dtype),
            shape: info.shape.clone(),
            offset: base + s as u64,
            len: (e - s) as u64,
            name,
        });
    }
    if meta.data_len() as u64 != data_len {
        return Err(invalid(format!(
            "safetensors header describes {} data bytes but the file holds {data_len} after the header",
            meta.data_len()
        )));
    }
    Ok(spans)
}

/// Brackets nested at most [`MAX_JSON_NESTING`] deep, outside strings (a string's escaped
/// quote does not end it).
fn check_nesting(json: &[u8]) -> Result<()> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_NESTING {
                    return Err(invalid(format!(
                        "not a valid safetensors header: brackets nested deeper than {MAX_JSON_NESTING}"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The JSON header as the `safetensors` crate reads it, by its rules, without its
/// `#[serde(flatten)]`: flatten buffers the whole header as generic JSON values first (about
/// 700 bytes a tensor: 1.1 GB for a header of 1.5 million empty tensors). Same semantics: a
/// later duplicate name replaces an earlier one, `__metadata__` at most once, then the crate's
/// own `Metadata::new` checks offsets, sizes and order. Tensors are ordered by their data
/// offsets (begin, end), then by name (empty tensors share an offset), so the order does not
/// depend on hashing.
fn metadata(json: &[u8]) -> Result<safetensors::tensor::Metadata> {
    use safetensors::tensor::TensorInfo;
    use std::collections::HashMap;

    struct Header {
        metadata: Option<HashMap<String, String>>,
        tensors: HashMap<String, TensorInfo>,
    }
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Header;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a safetensors header (a JSON object)")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Header, A::Error> {
            let mut metadata = None;
            let mut tensors = HashMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "__metadata__" {
                    if metadata.is_some() {
                        return Err(serde::de::Error::duplicate_field("__metadata__"));
                    }
                    metadata = Some(map.next_value::<Option<HashMap<String, String>>>()?);
                } else {
                    let info = map.next_value::<TensorInfo>()?;
                    tensors.insert(key, info);
                }
            }
            Ok(Header {
                metadata: metadata.flatten(),
                tensors,
            })
        }
    }
    let header = {
        let mut de = serde_json::Deserializer::from_slice(json);
        let h =
            serde::Deserializer::deserialize_map(&mut de, Visit).and_then(|h| de.end().map(|_| h));
        h.map_err(|e| {
            let msg = e.to_string();
            if msg.contains("unknown variant") {
                invalid(format!("unsupported dtype in safetensors header: {msg}"))
            } else {
                invalid(format!("not a valid safetensors header: {msg}"))
            }
        })?
    };
    let mut tensors: Vec<(String, TensorInfo)> = header.tensors.into_iter().collect();
    tensors.sort_by(|(a, x), (b, y)| (x.data_offsets, a).cmp(&(y.data_offsets, b)));
    safetensors::tensor::Metadata::new(header.metadata, tensors)
        .map_err(|e| invalid(format!("not a valid safetensors header: {e}")))
}

#[cfg(test)]
mod tests {
    use super::check_nesting;

    #[test]
    fn nesting_is_counted_outside_strings() {
        let ok = br#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":"[[[[[[[[[[[[[[[[[[[[\"[[["}}"#;
        assert!(check_nesting(ok).is_ok());
        let deep = format!(r#"{{"a":{{"x":{}1{}}}}}"#, "[".repeat(15), "]".repeat(15));
        assert!(check_nesting(deep.as_bytes()).is_err());
        let shallow = format!(r#"{{"a":{{"x":{}1{}}}}}"#, "[".repeat(14), "]".repeat(14));
        assert!(check_nesting(shallow.as_bytes()).is_ok());
    }
}
