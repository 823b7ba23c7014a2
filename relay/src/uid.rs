//! An object's `metadata.uid`: a stable identifier of its key, in Kubernetes' shape.

use strata_protocol::model::ObjectKey;

/// A stable identifier for the object's key (Kubernetes' `uid` shape).
pub fn uid(key: &ObjectKey) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = ring::digest::digest(&ring::digest::SHA256, key.to_string().as_bytes());
    // Every object of every list and watch event has one: written in one allocation.
    let mut out = String::with_capacity(36);
    for (i, b) in digest.as_ref()[..16].iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_protocol::model::{ObjectKeyParts, Space};

    #[test]
    fn a_uid_is_the_keys_digest_in_kubernetes_shape() {
        let key = ObjectKey::new(ObjectKeyParts {
            space: Space::default_space(),
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: Some("web".into()),
            name: "api".into(),
        });
        let digest = ring::digest::digest(&ring::digest::SHA256, key.to_string().as_bytes());
        let hex: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want = format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        );
        assert_eq!(uid(&key), want);
    }
}
