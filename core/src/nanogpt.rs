//! nanoGPT config files
