package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"google.golang.org/genproto/googleapis/api/httpbody"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// typedBody is a request body that remembers its (already negotiated) media
// type, so that rawMarshaler can put it into the HttpBody it decodes:
// grpc-gateway hands a decoder only the body reader.
type typedBody struct {
	io.ReadCloser
	contentType string
}

// rawMarshaler passes bytes through grpc-gateway untouched: request bodies
// become google.api.HttpBody (data + media type), HttpBody responses are
// written as their data with their media type, and no delimiter separates
// stream messages (each watch message already holds complete frames).
//
// It is registered for every media type (runtime.MIMEWildcard): the front
// end negotiates media types itself, because grpc-gateway matches Accept
// and Content-Type headers only exactly.
type rawMarshaler struct{}

var _ runtime.Marshaler = rawMarshaler{}

// ContentType is the HttpBody's media type.
func (rawMarshaler) ContentType(v any) string {
	if b, ok := v.(*httpbody.HttpBody); ok && b.GetContentType() != "" {
		return b.GetContentType()
	}
	return negotiation.JSON
}

// Marshal returns an HttpBody's data; a stream error chunk (which
// grpc-gateway builds as {"error": status}) becomes a Kubernetes Status.
func (rawMarshaler) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case *httpbody.HttpBody:
		return v.GetData(), nil
	case map[string]proto.Message:
		if s, ok := v["error"].(*spb.Status); ok {
			return json.Marshal(statusObject(apistatus.FromGRPC(status.FromProto(s))))
		}
	}
	return nil, fmt.Errorf("frontend: cannot marshal %T", v)
}

// Unmarshal reads raw bytes into an HttpBody.
func (rawMarshaler) Unmarshal(data []byte, v any) error {
	return decodeInto(data, "", v)
}

// NewDecoder returns a decoder that reads the whole body into an HttpBody.
func (rawMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		ct := ""
		if tb, ok := r.(*typedBody); ok {
			ct = tb.contentType
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return decodeInto(data, ct, v)
	})
}

// NewEncoder writes HttpBody data.
func (m rawMarshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		data, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
}

// Delimiter is empty: watch messages carry their own framing.
func (rawMarshaler) Delimiter() []byte { return nil }

func decodeInto(data []byte, ct string, v any) error {
	switch b := v.(type) {
	case **httpbody.HttpBody:
		if len(data) == 0 {
			return io.EOF
		}
		*b = &httpbody.HttpBody{ContentType: ct, Data: data}
		return nil
	case *httpbody.HttpBody:
		b.ContentType, b.Data = ct, data
		return nil
	}
	return errors.New("frontend: request bodies decode only into google.api.HttpBody")
}
