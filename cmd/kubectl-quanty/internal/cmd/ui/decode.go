package ui

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/quantyroot/quantykube/pkg/apiagg/ui"
	"github.com/quantyroot/quantykube/pkg/apiagg/uidecode"
)

// maxAnswerBytes bounds a JSON answer the proxy decodes: the server stops
// a page of History short of 3 MiB of values, which base64 and the JSON
// around them make at most a few times larger.
const maxAnswerBytes = 64 << 20

// wantsDecoded is whether a request asks for the page's JSON answers
// (ui.JSONType), whose values the proxy decodes.
func wantsDecoded(h http.Header) bool {
	for _, a := range strings.Split(h.Get("Accept"), ",") {
		if isDecodedType(strings.TrimSpace(a)) {
			return true
		}
	}
	return false
}

func isDecodedType(v string) bool {
	mt, params, err := mime.ParseMediaType(v)
	return err == nil && mt == "application/json" && params["as"] == "decoded"
}

// decodeAnswer decodes, in a successful JSON answer of the History API,
// every value the server sent as stored (ADR-047: the server links no
// API type; this plugin does): the page gets each object's JSON, or why
// there is none, as a server with the decoder would have sent it.
func decodeAnswer(resp *http.Response) error {
	if err := decodeBody(resp); err != nil {
		return &answerError{err}
	}
	return nil
}

// answerError is an answer the proxy could not decode.
type answerError struct{ err error }

func (e *answerError) Error() string { return e.err.Error() }
func (e *answerError) Unwrap() error { return e.err }

func decodeBody(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK || !isDecodedType(resp.Header.Get("Content-Type")) {
		return nil
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return fmt.Errorf("a JSON answer in Content-Encoding %q, which the proxy did not ask for", enc)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if len(body) > maxAnswerBytes {
		return fmt.Errorf("a JSON answer of more than %d bytes", maxAnswerBytes)
	}
	out, err := decodeValues(body)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// decodeValues rewrites a JSON answer: each key-value object that holds a
// value as stored ("value", base64, with ui.UndecodedProblem) gets the
// object that value holds ("object") or why it holds none ("problem"),
// and loses "value". Everything else is kept as it is (numbers exactly).
func decodeValues(body []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("a JSON answer that is not JSON: %w", err)
	}
	decodeIn(v)
	return json.Marshal(v)
}

func decodeIn(v any) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			decodeIn(e)
		}
	case map[string]any:
		if s, ok := v["value"].(string); ok && v["problem"] == ui.UndecodedProblem {
			delete(v, "value")
			delete(v, "problem")
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				v["problem"] = "a value that is not base64: " + err.Error()
				return
			}
			if obj, problem := uidecode.Decode(raw); problem != "" {
				v["problem"] = problem
			} else {
				v["object"] = obj
			}
			return
		}
		for _, e := range v {
			decodeIn(e)
		}
	}
}
