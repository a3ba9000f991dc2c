package resources

// MaxRequestBytes bounds what a caller may hand the ResourceService in one
// request, through either front door: the body of a REST request (larger
// is a 413) and a whole gRPC request message (larger is ResourceExhausted,
// refused before the message is read). It is kube-apiserver's 3 MiB body
// limit, above the store's 1.5 MiB value limit, so that the store's own
// error speaks for objects in between; a gRPC message also carries the
// request's ref and options, a few hundred bytes beside the body.
const MaxRequestBytes = 3 << 20
