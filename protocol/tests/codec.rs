//! The frame codec: round trips, exact lengths, and refusal (never a panic) of
//! truncated, bit-flipped, oversized and trailing-garbage input.

mod strategies;

use proptest::prelude::*;
use strata_protocol::codec::{
    self, DEFAULT_MAX_FRAME, DecodeError, EncodeError, FRAME_HEADER_LEN, FrameDecoder,
};
use strata_protocol::wire::{ChildToParent, JoinReply, JoinRequest, ParentToChild};
use strategies::{child_to_parent, join_reply, join_request, parent_to_child};

fn frame<M: serde::Serialize>(msg: &M) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode(msg, DEFAULT_MAX_FRAME, &mut out).expect("encodes");
    out
}

proptest! {
    #[test]
    fn every_child_message_round_trips(msg in child_to_parent()) {
        let bytes = frame(&msg);
        prop_assert_eq!(codec::encoded_len(&msg).unwrap(), bytes.len());
        let (back, used) = codec::decode::<ChildToParent>(&bytes, DEFAULT_MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn every_parent_message_round_trips(msg in parent_to_child()) {
        let bytes = frame(&msg);
        prop_assert_eq!(codec::encoded_len(&msg).unwrap(), bytes.len());
        let (back, used) = codec::decode::<ParentToChild>(&bytes, DEFAULT_MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn join_messages_round_trip(request in join_request(), reply in join_reply()) {
        let bytes = frame(&request);
        let (back, used) = codec::decode::<JoinRequest>(&bytes, DEFAULT_MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, request);
        let bytes = frame(&reply);
        let (back, used) = codec::decode::<JoinReply>(&bytes, DEFAULT_MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, reply);
    }

    /// A strict prefix of a frame is never a message: it waits for more bytes or, when
    /// the prefix cuts the body short, it is simply incomplete.
    #[test]
    fn truncated_frames_are_incomplete_never_messages(msg in parent_to_child(), cut in any::<prop::sample::Index>()) {
        let bytes = frame(&msg);
        let cut = cut.index(bytes.len());
        let result = codec::decode::<ParentToChild>(&bytes[..cut], DEFAULT_MAX_FRAME);
        prop_assert!(matches!(result, Ok(None)), "prefix of {} of {} bytes gave {:?}", cut, bytes.len(), result);
    }

    /// Flipped bits decode to an error or to some message, and never panic; the header
    /// check still holds.
    #[test]
    fn bit_flipped_frames_never_panic(
        msg in child_to_parent(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
    ) {
        let mut bytes = frame(&msg);
        for (i, bit) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        if let Ok(Some((_, used))) = codec::decode::<ChildToParent>(&bytes, 4096) {
            prop_assert!(used <= bytes.len());
        }
    }

    /// Arbitrary bytes never panic the decoder either.
    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = codec::decode::<ParentToChild>(&bytes, DEFAULT_MAX_FRAME);
        let _ = codec::decode::<ChildToParent>(&bytes, DEFAULT_MAX_FRAME);
    }

    /// Frames fed in arbitrary chunks come out whole and in order.
    #[test]
    fn the_stream_decoder_reassembles_any_chunking(
        msgs in prop::collection::vec(parent_to_child(), 1..6),
        chunks in prop::collection::vec(1usize..40, 1..200),
    ) {
        let mut stream = Vec::new();
        for m in &msgs {
            codec::encode(m, DEFAULT_MAX_FRAME, &mut stream).unwrap();
        }
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME);
        let mut out = Vec::new();
        let mut rest = stream.as_slice();
        let mut sizes = chunks.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap()).min(rest.len());
            decoder.extend(&rest[..n]);
            rest = &rest[n..];
            while let Some(m) = decoder.next_message::<ParentToChild>().unwrap() {
                out.push(m);
            }
        }
        prop_assert_eq!(decoder.buffered(), 0);
        prop_assert_eq!(out, msgs);
    }
}

#[test]
fn an_oversized_declaration_is_refused_from_the_header_alone() {
    let header = (64u32 << 20).to_be_bytes();
    assert_eq!(
        codec::decode::<ChildToParent>(&header, DEFAULT_MAX_FRAME).unwrap_err(),
        DecodeError::Oversized {
            len: 64 << 20,
            max: DEFAULT_MAX_FRAME
        }
    );
    let mut decoder = FrameDecoder::new(1024);
    decoder.extend(&2000u32.to_be_bytes());
    assert!(matches!(
        decoder.next_message::<ChildToParent>(),
        Err(DecodeError::Oversized {
            len: 2000,
            max: 1024
        })
    ));
    // The decoder stays failed: the stream cannot be resynchronized.
    decoder.extend(&frame(&ChildToParent::Ping { nonce: 1 }));
    assert!(decoder.next_message::<ChildToParent>().is_err());
    assert_eq!(decoder.buffered(), 0, "nothing kept after the refusal");
}

#[test]
fn encoding_over_the_maximum_writes_nothing() {
    let msg = ChildToParent::Goodbye {
        code: strata_protocol::wire::ErrorCode::ShuttingDown,
        reason: "x".repeat(100),
    };
    let mut out = vec![1, 2, 3];
    assert!(matches!(
        codec::encode(&msg, 50, &mut out),
        Err(EncodeError::Oversized { max: 50, .. })
    ));
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn a_corrupt_collection_length_is_refused_without_allocating_it() {
    // A Reports body claiming 2^60 items.
    let mut body = vec![3u8]; // variant index of Reports
    body.extend([0, 0, 0]); // epoch, epoch_start, seq (varint zeros)
    body.push(253); // varint marker for a u64 length...
    body.extend((1u64 << 60).to_be_bytes());
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend(&body);
    let err = codec::decode::<ChildToParent>(&bytes, DEFAULT_MAX_FRAME).unwrap_err();
    // Had the decoder trusted the length, this test would abort on allocation failure;
    // serde's cautious size hints and bincode's limit keep preallocation bounded, and
    // the missing items make it an error.
    assert!(matches!(err, DecodeError::Corrupt { .. }), "{err:?}");
}

#[test]
fn trailing_garbage_inside_a_frame_is_refused() {
    let mut body = frame(&ChildToParent::Ping { nonce: 7 })[FRAME_HEADER_LEN..].to_vec();
    body.extend([0xAA, 0xBB]);
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend(&body);
    assert!(matches!(
        codec::decode::<ChildToParent>(&bytes, DEFAULT_MAX_FRAME),
        Err(DecodeError::TrailingBytes { used, .. }) if used == body.len() - 2
    ));
}

#[test]
fn values_round_trip_and_reject_trailing_bytes() {
    let msg = ChildToParent::Ping { nonce: 42 };
    let bytes = codec::encode_value(&msg).unwrap();
    assert_eq!(codec::decode_value::<ChildToParent>(&bytes).unwrap(), msg);
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(codec::decode_value::<ChildToParent>(&longer).is_err());
}

#[test]
fn integer_dense_bodies_decode_at_their_length() {
    // Ten million zeros take a byte each on the wire but 8 bytes each of bincode's
    // allocation budget: a limit fixed at a few times the maximum frame refused this
    // valid 10 MB frame.
    let msg = vec![0u64; 10_000_000];
    let mut bytes = Vec::new();
    codec::encode(&msg, DEFAULT_MAX_FRAME, &mut bytes).unwrap();
    assert!(bytes.len() < DEFAULT_MAX_FRAME);
    let (back, used) = codec::decode::<Vec<u64>>(&bytes, DEFAULT_MAX_FRAME)
        .unwrap()
        .unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(back.len(), msg.len());
}

#[test]
fn a_maximum_above_the_ceiling_acts_as_the_ceiling() {
    let header = ((codec::MAX_FRAME_CEILING + 1) as u32).to_be_bytes();
    assert!(matches!(
        codec::decode::<ChildToParent>(&header, usize::MAX),
        Err(DecodeError::Oversized { max, .. }) if max == codec::MAX_FRAME_CEILING
    ));
}

/// An object's body is written as `Vec<u8>` was (its length, then its bytes), now in one
/// copy where it went byte by byte: what stores and older peers wrote reads back, and
/// the other way round. JSON still reads it from an array of numbers.
#[test]
fn a_body_is_written_as_a_vec_of_bytes_was() {
    use strata_protocol::codec::{decode_value, encode_value};
    use strata_protocol::model::Body;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let as_vec = encode_value(&bytes).unwrap();
    let as_body = encode_value(&Body::from(bytes.clone())).unwrap();
    assert_eq!(as_vec, as_body);
    let back: Body = decode_value(&as_vec).unwrap();
    assert_eq!(&*back, &bytes[..]);
    let old: Vec<u8> = decode_value(&as_body).unwrap();
    assert_eq!(old, bytes);
    let json: Body = serde_json::from_str("[104, 105]").unwrap();
    assert_eq!(&*json, b"hi");
    // A length beyond the input is an error, not an allocation of that length.
    let mut forged = encode_value(&Body::from(&b"hi"[..])).unwrap();
    forged[0] = 0xfc; // the varint marker of a four-byte length...
    forged.splice(1..1, [0x7f, 0xff, 0xff, 0xff]); // ...of about two billion
    assert!(decode_value::<Body>(&forged).is_err());
}

#[test]
fn a_status_and_an_upsynced_manifest_are_written_as_their_vecs_of_bytes_were() {
    use std::collections::BTreeMap;
    use strata_protocol::codec::{decode_value, encode_value};
    use strata_protocol::model::{Health, Revision, Status};
    use strata_protocol::time::UnixMillis;
    use strata_protocol::wire::ReportValue;

    /// `Status` as it was derived before: `status` a plain `Vec<u8>`, a sequence.
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Before {
        health: Health,
        revision: Revision,
        observed_generation: Option<i64>,
        message: Option<String>,
        numbers: BTreeMap<String, i64>,
        status: Vec<u8>,
        observed_at: UnixMillis,
    }
    /// `ReportValue`'s variants up to `Upsynced`, the fifth, as it was.
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    enum BeforeValue {
        Status,
        Summary,
        Cluster,
        Link,
        Upsynced(Vec<u8>),
    }

    let json: Vec<u8> = br#"{"readyReplicas":3,"conditions":[]}"#.repeat(20);
    let now = Status {
        health: Health::Available,
        revision: Revision(7),
        observed_generation: Some(2),
        message: Some("ok".into()),
        numbers: BTreeMap::from([("readyReplicas".to_owned(), 3)]),
        status: json.clone(),
        observed_at: UnixMillis(1_700_000_000_000),
    };
    let before = Before {
        health: now.health,
        revision: now.revision,
        observed_generation: now.observed_generation,
        message: now.message.clone(),
        numbers: now.numbers.clone(),
        status: json.clone(),
        observed_at: now.observed_at,
    };
    let written = encode_value(&now).unwrap();
    assert_eq!(written, encode_value(&before).unwrap());
    assert_eq!(
        decode_value::<Status>(&encode_value(&before).unwrap()).unwrap(),
        now
    );
    assert_eq!(decode_value::<Before>(&written).unwrap(), before);
    // JSON (the API's) still reads an array of numbers.
    let via_json: Status = serde_json::from_str(&serde_json::to_string(&before).unwrap()).unwrap();
    assert_eq!(via_json, now);

    let upsynced = ReportValue::Upsynced(json.clone());
    let old = BeforeValue::Upsynced(json);
    assert_eq!(
        encode_value(&upsynced).unwrap(),
        encode_value(&old).unwrap()
    );
    assert_eq!(
        decode_value::<ReportValue>(&encode_value(&old).unwrap()).unwrap(),
        upsynced
    );
}
