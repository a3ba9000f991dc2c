package watchframe

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// This file reads frames back, for a relay of pre-encoded frames that must
// know what it relays without decoding each object: where a batch's last
// frame starts, which event type a frame carries, and the Status of an
// ERROR frame. mediaType is negotiation.JSON (Table frames are JSON too) or
// negotiation.Protobuf, as in Format.MediaType.

// errMalformed: bytes that are not frames of the format.
var errMalformed = errors.New("watchframe: malformed frame")

// Last splits frames, complete frames one after another, into the frames
// before the last one and the last one. ok is false when frames is empty
// or does not end with a complete frame.
//
// A JSON frame is one line (its JSON is compact, so it holds no newline
// but the one that ends it): Last steps from newline to newline with
// bytes.IndexByte, which is vectorized, where bytes.LastIndexByte would
// read the last frame back byte by byte (a relay does this once per
// message, and a live watch's message is typically one frame of a
// kilobyte or more). A protobuf frame is found by stepping over the
// length prefixes from the start.
func Last(frames []byte, mediaType string) (before, last []byte, ok bool) {
	if len(frames) == 0 {
		return nil, nil, false
	}
	if mediaType != negotiation.Protobuf {
		if frames[len(frames)-1] != '\n' {
			return nil, nil, false
		}
		start := 0
		for {
			i := bytes.IndexByte(frames[start:len(frames)-1], '\n')
			if i < 0 {
				return frames[:start], frames[start:], true
			}
			start += i + 1
		}
	}
	start := 0
	for {
		if len(frames)-start < 4 {
			return nil, nil, false
		}
		end := start + 4 + int(binary.BigEndian.Uint32(frames[start:]))
		switch {
		case end > len(frames) || end <= start:
			return nil, nil, false
		case end == len(frames):
			return frames[:start], frames[start:], true
		}
		start = end
	}
}

// eventType is the event type b names; the types Kubernetes defines come
// without an allocation (a relay asks once per message).
func eventType(b []byte) watch.EventType {
	switch string(b) {
	case string(watch.Added):
		return watch.Added
	case string(watch.Modified):
		return watch.Modified
	case string(watch.Deleted):
		return watch.Deleted
	case string(watch.Bookmark):
		return watch.Bookmark
	case string(watch.Error):
		return watch.Error
	}
	return watch.EventType(b)
}

// Type returns the event type of one frame; false when frame is not a
// frame of the format.
func Type(frame []byte, mediaType string) (watch.EventType, bool) {
	if mediaType != negotiation.Protobuf {
		// Frame and AppendJSONFrame write the type first.
		if rest, ok := bytes.CutPrefix(frame, []byte(jsonFrameHead)); ok {
			if i := bytes.IndexByte(rest, '"'); i >= 0 {
				return eventType(rest[:i]), true
			}
		}
		var ev struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(frame, &ev); err != nil || ev.Type == "" {
			return "", false
		}
		return watch.EventType(ev.Type), true
	}
	ev, ok := protoEvent(frame)
	if !ok {
		return "", false
	}
	for len(ev) > 0 {
		num, typ, n := protowire.ConsumeTag(ev)
		if n < 0 {
			return "", false
		}
		ev = ev[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(ev)
			if n < 0 {
				return "", false
			}
			return eventType(v), true
		}
		if n = protowire.ConsumeFieldValue(num, typ, ev); n < 0 {
			return "", false
		}
		ev = ev[n:]
	}
	return "", false
}

// protoEvent returns the WatchEvent of a protobuf frame.
func protoEvent(frame []byte) ([]byte, bool) {
	if len(frame) < 4 || int(binary.BigEndian.Uint32(frame)) != len(frame)-4 {
		return nil, false
	}
	return frame[4:], true
}

// ErrorStatus decodes the Status an ERROR frame carries.
func ErrorStatus(frame []byte, mediaType string) (*metav1.Status, error) {
	st := &metav1.Status{}
	if mediaType != negotiation.Protobuf {
		var ev metav1.WatchEvent
		if err := json.Unmarshal(frame, &ev); err != nil {
			return nil, fmt.Errorf("watchframe: %w", err)
		}
		if ev.Type != string(watch.Error) {
			return nil, fmt.Errorf("%w: a %s event, not %s", errMalformed, ev.Type, watch.Error)
		}
		if err := json.Unmarshal(ev.Object.Raw, st); err != nil {
			return nil, fmt.Errorf("watchframe: %w", err)
		}
		return st, nil
	}
	data, ok := protoEvent(frame)
	if !ok {
		return nil, errMalformed
	}
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(data); err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if ev.Type != string(watch.Error) {
		return nil, fmt.Errorf("%w: a %s event, not %s", errMalformed, ev.Type, watch.Error)
	}
	env, ok := bytes.CutPrefix(ev.Object.Raw, envelopePrefix[:])
	if !ok {
		return nil, fmt.Errorf("%w: the object is not a protobuf envelope", errMalformed)
	}
	var unk runtime.Unknown
	if err := unk.Unmarshal(env); err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	if err := st.Unmarshal(unk.Raw); err != nil {
		return nil, fmt.Errorf("watchframe: %w", err)
	}
	return st, nil
}
