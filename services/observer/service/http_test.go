package service_test

import (
	"context"
	"net/http"
	"time"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

func newRequest(ctx context.Context, url string) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
}
