//! [`codes!`](crate::codes): how berm declares a closed set of numbered codes whose numbers
//! (and names) are a documented contract: the ABI's [`ErrorCode`](crate::word::ErrorCode)
//! and the exit codes of `berm`, `bermd` and `berm-vmm`. One macro writes the enum, its
//! representation, `code()`, and for named sets `name()` and `ALL`, so no set carries its
//! own copy of that code and a name cannot drift from its variant.

/// Declares a `#[repr]` enum of numbered codes with `code()`; with `=> "name"` on every
/// variant, also `name()` (the snake_case word used in lines, messages and docs) and `ALL`
/// (every code, in the order declared).
///
/// ```
/// berm_abi::codes! {
///     /// How a tool ended.
///     pub enum Ended: u8 {
///         /// It finished.
///         Done = 0 => "done",
///         /// It failed.
///         Failed = 1 => "failed",
///     }
/// }
/// assert_eq!(Ended::Failed.code(), 1);
/// assert_eq!(Ended::ALL.map(Ended::name), ["done", "failed"]);
/// ```
#[macro_export]
macro_rules! codes {
    (@enum
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident {
            $($(#[$vmeta:meta])* $variant:ident = $num:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr($repr)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $num,)+
        }

        impl $name {
            /// The code's number.
            pub const fn code(self) -> $repr {
                self as $repr
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident {
            $($(#[$vmeta:meta])* $variant:ident = $num:literal => $word:literal,)+
        }
    ) => {
        $crate::codes!(@enum
            $(#[$meta])*
            $vis enum $name: $repr {
                $($(#[$vmeta])* $variant = $num,)+
            }
        );

        impl $name {
            /// Every code, in the order declared.
            pub const ALL: [$name; [$($num),+].len()] = [$($name::$variant),+];

            /// The snake_case name used in lines, messages and docs.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $repr:ident {
            $($(#[$vmeta:meta])* $variant:ident = $num:literal,)+
        }
    ) => {
        $crate::codes!(@enum
            $(#[$meta])*
            $vis enum $name: $repr {
                $($(#[$vmeta])* $variant = $num,)+
            }
        );
    };
}
