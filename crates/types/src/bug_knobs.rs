//! The shape of a set of bug knobs, declared once for every protocol crate.

/// Declares a set of deliberate protocol mistakes (bug knobs) for the simulator.
///
/// With the invoking crate's `sim-bugs` feature, the struct has one `pub bool` field
/// per knob and a method of the same name reading it. Without the feature (every
/// production build), the struct is empty and every method is a constant `false`,
/// so the mistakes compile away and no production type carries them.
///
/// The invoking crate must declare a `sim-bugs` feature.
#[macro_export]
macro_rules! bug_knobs {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$knob_meta:meta])* $knob:ident ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[cfg(feature = "sim-bugs")]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $name {
            $( $(#[$knob_meta])* pub $knob: bool, )*
        }

        #[cfg(feature = "sim-bugs")]
        impl $name {
            /// No mistake: how every real deployment runs.
            pub const NONE: Self = Self { $( $knob: false, )* };

            $(
                $(#[$knob_meta])*
                #[inline]
                pub const fn $knob(&self) -> bool {
                    self.$knob
                }
            )*

            /// Whether any mistake is switched on.
            pub const fn any(&self) -> bool {
                false $( || self.$knob )*
            }
        }

        $(#[$meta])*
        #[cfg(not(feature = "sim-bugs"))]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $name;

        #[cfg(not(feature = "sim-bugs"))]
        impl $name {
            /// No mistake: how every real deployment runs.
            pub const NONE: Self = Self;

            $(
                $(#[$knob_meta])*
                #[inline(always)]
                pub const fn $knob(&self) -> bool {
                    false
                }
            )*

            /// Whether any mistake is switched on: never, in a build without the
            /// `sim-bugs` feature.
            pub const fn any(&self) -> bool {
                false
            }
        }
    };
}
