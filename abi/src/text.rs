//! [`serde_as_text!`](crate::serde_as_text): for types whose JSON form is their text form
//! ([`Grant`](crate::grant::Grant), berm-manifest's `Digest`), so each does not carry its own
//! pair of serde impls. It lives here, the lowest crate, so every crate above can use it.

/// Implements `Serialize` as the type's `Display` text and `Deserialize` as its `FromStr`
/// parse of a string, the parse error's message becoming the serde error. The calling crate
/// must depend on `serde`.
#[macro_export]
macro_rules! serde_as_text {
    ($ty:ty) => {
        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let text = <String as ::serde::Deserialize>::deserialize(deserializer)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}
