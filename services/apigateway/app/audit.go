package app

import (
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// protobufToJSON converts the protobuf bodies of requests and responses
// (client-go and kubectl send and ask for protobuf) to the JSON that
// audit events record, with the served kinds' scheme.
func protobufToJSON(c *codec.Codec) audit.Converter {
	pb := protobuf.NewSerializer(c.Scheme(), c.Scheme())
	return func(data []byte) ([]byte, error) {
		obj, _, err := pb.Decode(data, nil, nil)
		if err != nil {
			return nil, err
		}
		return c.EncodeToBytes(obj, negotiation.JSON)
	}
}
