//! link codec
