package celpolicy

import "github.com/meridian-cp/meridian/services/admission/internal/storecache"

// Store is what the policies are read from (storecache.Store):
// *storeclient.Client implements it.
type Store = storecache.Store

// Decrypt turns a stored value into the encoded object (values encrypted
// at rest).
type Decrypt = storecache.Decrypt
