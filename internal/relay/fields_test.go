// This file holds forEachField, which changes one field of a struct at a
// time, for the tests that every field takes part in the keys.

package relay

import (
	"reflect"
	"testing"
)

// forEachField calls f with a copy of *v in which one exported leaf field
// (embedded structs walked into) has another value.
func forEachField[T any](t *testing.T, v *T, f func(name string, mod *T)) {
	t.Helper()
	var walk func(rv reflect.Value, path []int)
	walk = func(rv reflect.Value, path []int) {
		for i := range rv.NumField() {
			sf := rv.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			p := append(append([]int(nil), path...), i)
			if sf.Anonymous {
				walk(rv.Field(i), p)
				continue
			}
			mod := *v
			fv := reflect.ValueOf(&mod).Elem().FieldByIndex(p)
			switch fv.Kind() {
			case reflect.String:
				fv.SetString(fv.String() + "x")
			case reflect.Uint32, reflect.Uint64:
				fv.SetUint(fv.Uint() + 1)
			case reflect.Int32:
				fv.SetInt(fv.Int() + 1)
			case reflect.Bool:
				fv.SetBool(!fv.Bool())
			case reflect.Slice:
				fv.Set(reflect.Append(fv, reflect.ValueOf("zz:1")))
			case reflect.Pointer:
				fv.Set(reflect.New(fv.Type().Elem()))
			default:
				t.Fatalf("field %s of kind %s: teach forEachField", sf.Name, fv.Kind())
			}
			f(sf.Name, &mod)
		}
	}
	walk(reflect.ValueOf(v).Elem(), nil)
}
