//! Feeds arbitrary bytes to the protobuf body decoder (strata-kube-builtins): as a whole
//! body, and as the object of an envelope naming a built-in kind the first byte picks,
//! so that the fuzzer reaches deep into every kind's messages. Nothing may panic or
//! nest without bound; whatever decodes is an object naming its apiVersion and kind,
//! no larger than the input warrants.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_kube_builtins::protobuf;

fn field(n: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(n << 3 | 2);
    let mut len = payload.len();
    loop {
        let b = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(payload);
}

fn check(body: &[u8]) {
    if let Ok(v) = protobuf::decode(body) {
        assert!(v["apiVersion"].is_string() && v["kind"].is_string());
        let size = serde_json::to_vec(&v).expect("a decoded value serializes").len();
        assert!(size <= 64 * body.len() + 4096, "{size} bytes of JSON from {}", body.len());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let Some((&pick, raw)) = data.split_first() else { return };
    let kinds = protobuf::kinds().expect("the table parses");
    let (api_version, kind, _) = kinds[usize::from(pick) % kinds.len()];
    let mut type_meta = Vec::new();
    field(1, api_version.as_bytes(), &mut type_meta);
    field(2, kind.as_bytes(), &mut type_meta);
    let mut body = b"k8s\0".to_vec();
    field(1, &type_meta, &mut body);
    field(2, raw, &mut body);
    check(&body);
});
