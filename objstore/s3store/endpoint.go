package s3store

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// endpointCacheMax bounds the remembered endpoints (one per bucket and
// client setting in practice); a full cache starts over.
const endpointCacheMax = 1 << 10

// endpointCache remembers the SDK's endpoint resolution. The SDK runs its
// S3 rule set for every request; that is a pure function of the
// parameters, and its evaluation (a function with a frame large enough to
// grow a fresh goroutine's stack several times) was a visible share of the
// CPU a small object's PUT costs. The object key is left out of the cache
// key: the rule set does not read it (TestEndpointIgnoresKey keeps that
// true across SDK upgrades), and keys are what vary from request to
// request. Errors are not remembered.
type endpointCache struct {
	next s3.EndpointResolverV2
	mu   sync.Mutex
	m    map[endpointKey]smithyendpoints.Endpoint
}

func newEndpointCache(next s3.EndpointResolverV2) *endpointCache {
	return &endpointCache{next: next, m: map[endpointKey]smithyendpoints.Endpoint{}}
}

// optString and optBool are a parameter's value and whether it was set.
type optString struct {
	set bool
	v   string
}

type optBool struct {
	set, v bool
}

func strOf(p *string) optString {
	if p == nil {
		return optString{}
	}
	return optString{true, *p}
}

func boolOf(p *bool) optBool {
	if p == nil {
		return optBool{}
	}
	return optBool{true, *p}
}

// endpointKey is every field of s3.EndpointParameters but Key
// (TestEndpointKeyCoversParameters fails when the SDK adds one).
type endpointKey struct {
	bucket, region, endpoint, prefix, copySource optString

	useFIPS, useDualStack, forcePathStyle, accelerate, useGlobalEndpoint,
	useObjectLambdaEndpoint, disableAccessPoints, disableMultiRegionAccessPoints,
	useArnRegion, useS3ExpressControlEndpoint, disableS3ExpressSessionAuth optBool
}

func keyOf(p s3.EndpointParameters) endpointKey {
	return endpointKey{
		bucket: strOf(p.Bucket), region: strOf(p.Region), endpoint: strOf(p.Endpoint),
		prefix: strOf(p.Prefix), copySource: strOf(p.CopySource),
		useFIPS: boolOf(p.UseFIPS), useDualStack: boolOf(p.UseDualStack),
		forcePathStyle: boolOf(p.ForcePathStyle), accelerate: boolOf(p.Accelerate),
		useGlobalEndpoint:              boolOf(p.UseGlobalEndpoint),
		useObjectLambdaEndpoint:        boolOf(p.UseObjectLambdaEndpoint),
		disableAccessPoints:            boolOf(p.DisableAccessPoints),
		disableMultiRegionAccessPoints: boolOf(p.DisableMultiRegionAccessPoints),
		useArnRegion:                   boolOf(p.UseArnRegion),
		useS3ExpressControlEndpoint:    boolOf(p.UseS3ExpressControlEndpoint),
		disableS3ExpressSessionAuth:    boolOf(p.DisableS3ExpressSessionAuth),
	}
}

// ResolveEndpoint implements s3.EndpointResolverV2. Every call gets its
// own copy of the remembered endpoint's properties and auth options: the
// SDK rewrites a resolved endpoint's auth options in place (its auth
// resolver rebases them, and writes into the signer properties of the
// scheme it picks), which on a shared endpoint would race between
// requests.
func (c *endpointCache) ResolveEndpoint(ctx context.Context, p s3.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := keyOf(p)
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return copyEndpoint(e), nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if len(c.m) >= endpointCacheMax {
		clear(c.m)
	}
	c.m[k] = e
	c.mu.Unlock()
	return copyEndpoint(e), nil
}

// copyEndpoint copies what of e a request may write to: its headers, its
// properties, and the auth options among them (each option and its
// property sets). The URI is a value already.
func copyEndpoint(e smithyendpoints.Endpoint) smithyendpoints.Endpoint {
	out := smithyendpoints.Endpoint{URI: e.URI, Headers: e.Headers.Clone()}
	out.Properties.SetAll(&e.Properties)
	if opts, ok := smithyauth.GetAuthOptions(&e.Properties); ok {
		cp := make([]*smithyauth.Option, len(opts))
		for i, o := range opts {
			c := &smithyauth.Option{SchemeID: o.SchemeID}
			c.IdentityProperties.SetAll(&o.IdentityProperties)
			c.SignerProperties.SetAll(&o.SignerProperties)
			cp[i] = c
		}
		smithyauth.SetAuthOptions(&out.Properties, cp)
	}
	return out
}
