//! An OIDC ID token (a JWS in compact form, `HEADER.PAYLOAD.SIGNATURE`) checked as
//! kube-apiserver checks one: signed by a key of the issuer's JWKS (ES256 or RS256, with
//! ring), issued by the configured issuer (`iss`), for the configured audience (`aud`,
//! a string or a list), and valid now (`exp`, `nbf`, with [`LEEWAY_SECS`] of clock
//! skew). Pure: the time is given.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::Subject;

/// Clock skew allowed between the issuer and the root, in seconds.
pub const LEEWAY_SECS: u64 = 30;

/// Why an ID token is refused (the 401's message names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the fields are what the token says and what was expected
pub enum TokenError {
    /// Not three base64url parts of JSON.
    #[error("not a JWT: {0}")]
    Malformed(&'static str),
    /// A signature algorithm other than ES256 or RS256.
    #[error("signature algorithm {0:?} is not accepted (ES256, RS256)")]
    Algorithm(String),
    /// No key of the issuer has this id (after fetching its keys again).
    #[error("no key {kid:?} among the issuer's keys")]
    UnknownKey { kid: String },
    /// The signature does not verify with the issuer's key.
    #[error("the signature does not verify with the issuer's key {kid:?}")]
    Signature { kid: String },
    /// Another issuer.
    #[error("issued by {got:?}, not by {want:?}")]
    Issuer { got: String, want: String },
    /// Not for this audience.
    #[error("audience {got} does not include {want:?}")]
    Audience { got: String, want: String },
    /// Expired.
    #[error("expired at {exp} (Unix seconds; now {now})")]
    Expired { exp: u64, now: u64 },
    /// Not valid yet.
    #[error("not valid before {nbf} (Unix seconds; now {now})")]
    NotYet { nbf: u64, now: u64 },
    /// A claim is missing or of the wrong type.
    #[error("claim {claim:?}: {what}")]
    Claim { claim: String, what: &'static str },
    /// `email` names the user and `email_verified` is false.
    #[error("the email {0:?} is not verified (email_verified is false)")]
    Unverified(String),
}

/// Why a JWKS document does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Not `{"keys": [...]}`.
    #[error("not a JWKS document (an object with a \"keys\" list)")]
    Shape,
    /// A key of a usable type is incomplete.
    #[error("key {index}: {what}")]
    Key {
        /// Its index in `keys`.
        index: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// A public key of the issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    /// P-256, as the uncompressed point `04 || x || y`.
    Es256(Vec<u8>),
    /// RSA modulus and exponent (big-endian).
    Rs256 { n: Vec<u8>, e: Vec<u8> },
}

/// The issuer's signing keys (its JWKS), by key id. Keys of other types (or for
/// encryption) are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jwks {
    keys: BTreeMap<String, Key>,
}

impl Jwks {
    /// Reads a JWKS document.
    pub fn parse(doc: &Value) -> Result<Jwks, JwksError> {
        let list = doc["keys"].as_array().ok_or(JwksError::Shape)?;
        let mut keys = BTreeMap::new();
        for (index, k) in list.iter().enumerate() {
            if k["use"].as_str().is_some_and(|u| u != "sig") {
                continue;
            }
            let bytes = |field: &str| -> Result<Vec<u8>, JwksError> {
                k[field]
                    .as_str()
                    .and_then(|v| URL_SAFE_NO_PAD.decode(v).ok())
                    .ok_or(JwksError::Key {
                        index,
                        what: "a coordinate or component is missing or not base64url",
                    })
            };
            let key = match (k["kty"].as_str(), k["crv"].as_str()) {
                (Some("EC"), Some("P-256")) => {
                    let (x, y) = (bytes("x")?, bytes("y")?);
                    if x.len() != 32 || y.len() != 32 {
                        return Err(JwksError::Key {
                            index,
                            what: "P-256 coordinates are 32 bytes",
                        });
                    }
                    Key::Es256([&[4u8][..], &x, &y].concat())
                }
                (Some("RSA"), _) => Key::Rs256 {
                    n: bytes("n")?,
                    e: bytes("e")?,
                },
                _ => continue,
            };
            let kid = k["kid"].as_str().unwrap_or_default().to_owned();
            keys.insert(kid, key);
        }
        Ok(Jwks { keys })
    }

    /// Whether a key of this id is known (a token without `kid` is tried with every
    /// key).
    pub fn has(&self, kid: Option<&str>) -> bool {
        match kid {
            Some(kid) => self.keys.contains_key(kid),
            None => !self.keys.is_empty(),
        }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// What a token must be: whose, for whom, and when it is checked.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// `iss`.
    pub issuer: &'a str,
    /// One of `aud`.
    pub audience: &'a str,
    /// Now, in Unix seconds.
    pub now: u64,
}

/// A token taken apart, not verified yet.
#[derive(Debug, Clone)]
pub struct Parts<'a> {
    signed: &'a str,
    signature: Vec<u8>,
    alg: String,
    /// The key id the header names, if any.
    pub kid: Option<String>,
    claims: Map<String, Value>,
}

/// Takes a token apart (header, claims, signature); nothing is checked yet.
pub fn parts(token: &str) -> Result<Parts<'_>, TokenError> {
    let mut it = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(TokenError::Malformed("not three dot-separated parts"));
    };
    let json = |part: &str, what: &'static str| -> Result<Map<String, Value>, TokenError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| TokenError::Malformed(what))?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(TokenError::Malformed(what)),
        }
    };
    let header = json(h, "the header is not base64url JSON")?;
    let claims = json(p, "the payload is not base64url JSON")?;
    let signature = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed("the signature is not base64url"))?;
    Ok(Parts {
        signed: &token[..h.len() + 1 + p.len()],
        signature,
        alg: header
            .get("alg")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        kid: header.get("kid").and_then(Value::as_str).map(str::to_owned),
        claims,
    })
}

impl Parts<'_> {
    /// Verifies the signature with `keys`, then the issuer, audience and validity;
    /// returns the claims.
    pub fn verify(self, keys: &Jwks, expect: Expect<'_>) -> Result<Map<String, Value>, TokenError> {
        use ring::signature::{
            ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents,
            UnparsedPublicKey,
        };
        let kid = self.kid.clone().unwrap_or_default();
        let candidates: Vec<&Key> = match &self.kid {
            Some(k) => keys.keys.get(k).into_iter().collect(),
            None => keys.keys.values().collect(),
        };
        if candidates.is_empty() {
            return Err(TokenError::UnknownKey { kid });
        }
        let message = self.signed.as_bytes();
        let verified = candidates.iter().any(|key| match (self.alg.as_str(), key) {
            ("ES256", Key::Es256(point)) => UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
                .verify(message, &self.signature)
                .is_ok(),
            ("RS256", Key::Rs256 { n, e }) => RsaPublicKeyComponents { n, e }
                .verify(&RSA_PKCS1_2048_8192_SHA256, message, &self.signature)
                .is_ok(),
            _ => false,
        });
        if !["ES256", "RS256"].contains(&self.alg.as_str()) {
            return Err(TokenError::Algorithm(self.alg));
        }
        if !verified {
            return Err(TokenError::Signature { kid });
        }
        let claims = self.claims;
        let iss = claims
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if iss != expect.issuer {
            return Err(TokenError::Issuer {
                got: iss.to_owned(),
                want: expect.issuer.to_owned(),
            });
        }
        let aud_ok = match claims.get("aud") {
            Some(Value::String(a)) => a == expect.audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(expect.audience)),
            _ => false,
        };
        if !aud_ok {
            return Err(TokenError::Audience {
                got: claims
                    .get("aud")
                    .map_or("none".to_owned(), Value::to_string),
                want: expect.audience.to_owned(),
            });
        }
        let time = |name: &str| claims.get(name).and_then(Value::as_u64);
        let exp = time("exp").ok_or_else(|| TokenError::Claim {
            claim: "exp".to_owned(),
            what: "missing or not a number of seconds",
        })?;
        if expect.now >= exp.saturating_add(LEEWAY_SECS) {
            return Err(TokenError::Expired {
                exp,
                now: expect.now,
            });
        }
        if let Some(nbf) = time("nbf")
            && expect.now.saturating_add(LEEWAY_SECS) < nbf
        {
            return Err(TokenError::NotYet {
                nbf,
                now: expect.now,
            });
        }
        Ok(claims)
    }
}

/// The user and groups the claims name: `username_claim` (a string; when it is
/// `email`, `email_verified` must not be false) and `groups_claim` (a string or a
/// list of strings; absent: no groups).
pub fn subject(
    claims: &Map<String, Value>,
    username_claim: &str,
    groups_claim: Option<&str>,
) -> Result<Subject, TokenError> {
    let user = claims
        .get(username_claim)
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| TokenError::Claim {
            claim: username_claim.to_owned(),
            what: "missing or not a string: it names the user",
        })?
        .to_owned();
    if username_claim == "email" && claims.get("email_verified") == Some(&Value::Bool(false)) {
        return Err(TokenError::Unverified(user));
    }
    let groups = match groups_claim.and_then(|c| claims.get(c).map(|v| (c, v))) {
        None => Vec::new(),
        Some((_, Value::String(g))) => vec![g.clone()],
        Some((c, Value::Array(list))) => list
            .iter()
            .map(|g| g.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| TokenError::Claim {
                claim: c.to_owned(),
                what: "not a list of strings",
            })?,
        Some((c, _)) => {
            return Err(TokenError::Claim {
                claim: c.to_owned(),
                what: "not a string or a list of strings",
            });
        }
    };
    Ok(Subject { user, groups })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    use serde_json::json;

    fn key() -> (EcdsaKeyPair, Value) {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let jwk = json!({ "kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..]) });
        (pair, jwk)
    }

    fn sign(pair: &EcdsaKeyPair, kid: &str, claims: &Value) -> String {
        let h = URL_SAFE_NO_PAD.encode(json!({ "alg": "ES256", "kid": kid }).to_string());
        let p = URL_SAFE_NO_PAD.encode(claims.to_string());
        let rng = ring::rand::SystemRandom::new();
        let sig = pair.sign(&rng, format!("{h}.{p}").as_bytes()).unwrap();
        format!("{h}.{p}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    const NOW: u64 = 1_800_000_000;
    const EXPECT: Expect<'static> = Expect {
        issuer: "https://issuer",
        audience: "strata",
        now: NOW,
    };

    #[test]
    fn a_signed_token_for_us_is_accepted_and_every_fault_is_named() {
        let (pair, jwk) = key();
        let keys = Jwks::parse(&json!({ "keys": [jwk, { "kty": "oct", "k": "x" }] })).unwrap();
        assert_eq!(keys.len(), 1);
        let claims = json!({ "iss": "https://issuer", "aud": ["other", "strata"], "sub": "u1",
            "email": "a@x", "groups": ["ops"], "exp": NOW + 60, "nbf": NOW - 60 });
        let token = sign(&pair, "k1", &claims);
        let ok = parts(&token).unwrap().verify(&keys, EXPECT).unwrap();
        let s = subject(&ok, "email", Some("groups")).unwrap();
        assert_eq!((s.user.as_str(), s.groups), ("a@x", vec!["ops".to_owned()]));

        let check = |claims: Value, kid: &str| {
            parts(&sign(&pair, kid, &claims))
                .unwrap()
                .verify(&keys, EXPECT)
                .unwrap_err()
                .to_string()
        };
        let with = |k: &str, v: Value| {
            let mut c = claims.clone();
            c[k] = v;
            c
        };
        assert_eq!(
            check(claims.clone(), "k2"),
            "no key \"k2\" among the issuer's keys"
        );
        assert!(check(with("aud", json!("other")), "k1").starts_with("audience \"other\""));
        assert!(check(with("iss", json!("https://evil")), "k1").starts_with("issued by"));
        assert!(check(with("exp", json!(NOW - 600)), "k1").starts_with("expired at"));
        assert!(check(with("nbf", json!(NOW + 600)), "k1").starts_with("not valid before"));
        // Another key's signature, under this kid.
        let (other, _) = key();
        let forged = sign(&other, "k1", &claims);
        let e = parts(&forged).unwrap().verify(&keys, EXPECT).unwrap_err();
        assert!(matches!(e, TokenError::Signature { .. }), "{e}");
        // A changed payload under the original signature.
        let mut pieces: Vec<&str> = token.split('.').collect();
        let changed = URL_SAFE_NO_PAD.encode(with("sub", json!("root")).to_string());
        pieces[1] = &changed;
        let e = parts(&pieces.join("."))
            .unwrap()
            .verify(&keys, EXPECT)
            .unwrap_err();
        assert!(matches!(e, TokenError::Signature { .. }), "{e}");
        assert!(parts("a.b").is_err());
        let unverified = with("email_verified", json!(false));
        let c = parts(&sign(&pair, "k1", &unverified))
            .unwrap()
            .verify(&keys, EXPECT)
            .unwrap();
        assert!(matches!(
            subject(&c, "email", None),
            Err(TokenError::Unverified(_))
        ));
    }

    /// A 2048-bit RSA key (PKCS#1 DER, test only: ring signs with RSA but makes no keys).
    const RSA_KEY: &[u8] = include_bytes!("testdata/rsa-2048.der");

    #[test]
    fn rs256_tokens_verify_with_the_modulus_and_exponent_of_the_jwks() {
        let pair = ring::signature::RsaKeyPair::from_der(RSA_KEY).unwrap();
        let public: ring::signature::RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
        let jwk = json!({ "kty": "RSA", "kid": "r1", "n": URL_SAFE_NO_PAD.encode(&public.n),
            "e": URL_SAFE_NO_PAD.encode(&public.e) });
        let keys = Jwks::parse(&json!({ "keys": [jwk] })).unwrap();
        let sign = |claims: &Value| {
            let h = URL_SAFE_NO_PAD.encode(json!({ "alg": "RS256", "kid": "r1" }).to_string());
            let p = URL_SAFE_NO_PAD.encode(claims.to_string());
            let mut sig = vec![0; pair.public().modulus_len()];
            let rng = ring::rand::SystemRandom::new();
            pair.sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &rng,
                format!("{h}.{p}").as_bytes(),
                &mut sig,
            )
            .unwrap();
            format!("{h}.{p}.{}", URL_SAFE_NO_PAD.encode(sig))
        };
        let claims =
            json!({ "iss": "https://issuer", "aud": "strata", "sub": "u", "exp": NOW + 60 });
        let ok = parts(&sign(&claims))
            .unwrap()
            .verify(&keys, EXPECT)
            .unwrap();
        assert_eq!(subject(&ok, "sub", Some("groups")).unwrap().user, "u");
        // An ES256 header over the same key is refused, not tried as RSA.
        let token = sign(&claims);
        let mut pieces: Vec<&str> = token.split('.').collect();
        let es = URL_SAFE_NO_PAD.encode(json!({ "alg": "ES256", "kid": "r1" }).to_string());
        pieces[0] = &es;
        let e = parts(&pieces.join("."))
            .unwrap()
            .verify(&keys, EXPECT)
            .unwrap_err();
        assert!(matches!(e, TokenError::Signature { .. }), "{e}");
        let none = URL_SAFE_NO_PAD.encode(json!({ "alg": "none", "kid": "r1" }).to_string());
        pieces[0] = &none;
        let e = parts(&pieces.join("."))
            .unwrap()
            .verify(&keys, EXPECT)
            .unwrap_err();
        assert_eq!(e, TokenError::Algorithm("none".to_owned()));
    }
}
