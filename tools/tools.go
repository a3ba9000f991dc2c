//go:build tools

// Package tools pins the code-generation tools meridian builds from source.
// It lives outside go.work so that the tools' dependencies never change the
// versions the services resolve.
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
