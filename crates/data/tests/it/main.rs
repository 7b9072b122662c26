//! Integration tests of torchlight-data (one binary: each test binary links libtorch).
