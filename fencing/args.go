package fencing

import (
	"encoding"
	"net"
	"reflect"
	"strconv"
	"time"
)

// arg spells a fenced script's argument as go-redis writes a command's
// (Script.Run has always taken go-redis's arguments): strings and bytes as
// they are, numbers in decimal, a bool as 1 or 0, a time in RFC 3339 with
// nanoseconds, a duration in nanoseconds, a nil pointer as the zero value,
// and anything else through encoding.BinaryMarshaler.
func arg(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case net.IP:
		return string(v), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10), nil
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		return string(b), err
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return arg(reflect.Zero(rv.Type().Elem()).Interface())
		}
		return arg(rv.Elem().Interface())
	}
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(rv.Float(), 'f', -1, 64), nil
	}
	return "", invalidf("cannot pass a %T to a fenced script (implement encoding.BinaryMarshaler)", v)
}
