//! Feeds arbitrary bytes to the frame decoder, as a whole and in chunks, in both
//! directions. Nothing may panic, and whatever decodes must re-encode to a frame that
//! decodes to an equal message.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_protocol::codec::{self, FrameDecoder};
use strata_protocol::wire::{ChildToParent, ParentToChild};

const MAX: usize = 1 << 20;

fn check<M>(data: &[u8])
where
    M: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(Some((msg, used))) = codec::decode::<M>(data, MAX) {
        assert!(used <= data.len());
        let mut again = Vec::new();
        codec::encode(&msg, MAX, &mut again).expect("a decoded message re-encodes");
        let (back, _) = codec::decode::<M>(&again, MAX)
            .expect("re-encoded frame decodes")
            .expect("re-encoded frame is whole");
        assert_eq!(back, msg);
    }
    // The same bytes through the stream decoder, in chunks whose sizes come from the
    // input itself.
    let mut decoder = FrameDecoder::new(MAX);
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    for chunk in data.chunks(step) {
        decoder.extend(chunk);
        while let Ok(Some(_)) = decoder.next_message::<M>() {}
    }
}

fuzz_target!(|data: &[u8]| {
    check::<ChildToParent>(data);
    check::<ParentToChild>(data);
});
