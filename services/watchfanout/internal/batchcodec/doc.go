// Package batchcodec sends the batches of a watch pre-encoded: a Builder
// encodes a watch's frames as a meridian.watch.v1.WatchResponse (or a
// WatchManyResponse carrying one) by hand, straight into a buffer from a
// gRPC buffer pool, and the server's gRPC codec (Codec) hands that buffer
// to gRPC as it is; every other message goes through the proto codec.
//
// A batch's frames, which every watcher of an event shares, are thereby
// copied once, into the buffer gRPC writes to the socket, and sending a
// batch allocates nothing: no message structs, no resourceVersion string,
// no marshalled copy. watchfanout sends a message per watch for every
// burst of events, so what a send allocates is paid once per watch and
// sets the pace of the garbage collector.
//
// # Encoding
//
// A batch is a meridian.watch.v1.WatchResponse (Watch) or a
// WatchManyResponse carrying one (WatchMany), in canonical field order:
//
//	WatchManyResponse  08 <id>  12 <len(WatchResponse)>  WatchResponse
//	WatchResponse      0a <len(frames)> frames  [12 <len(rv)> rv]
//
// The builder reserves room for the header in front of the frames, sized
// for 3-byte lengths (batches of 16 KiB to 2 MiB, the size of a full
// batch), and writes it in place when the batch is that size. Other
// batches are copied into a buffer of their own size, so that a small
// message queued in gRPC does not pin a 32 KiB buffer.
//
// # Buffer lifetime
//
// gRPC's SendMsg on a server stream returns once the message is queued for
// the connection's writer, before its bytes reach the socket: the
// transport takes a reference to the encoded buffers (http2Server.write
// calls Ref) and its writer frees them once written (or when the stream is
// reset); SendMsg frees its own reference on return. A buffer handed to
// gRPC through Codec therefore goes back to its pool only when both are
// done with it — the builder never touches it again.
package batchcodec
