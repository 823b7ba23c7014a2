//! Framing and encoding of wire messages (bincode is confined to this module).
