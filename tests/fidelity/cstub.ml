(* tests/fidelity/cstub.ml — an OCaml hot loop calling C stubs
   (cstub_stubs.c) that call glibc's memmove and malloc/free. Checked by
   test_fidelity.py: stacks reach _start, and samples inside glibc show the stub
   between the OCaml caller and the glibc function.
   Usage: cstub.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

external memmove_loop : int -> int = "fid_memmove_loop"
external malloc_loop : int -> int = "fid_malloc_loop"

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

let[@inline never] call_memmove () = memmove_loop 200
let[@inline never] call_malloc () = malloc_loop 20_000

let () =
  let acc = ref 0 in
  for _ = 1 to scaled 4_500 do
    acc := !acc + call_memmove () + call_malloc ()
  done;
  Printf.printf "cstub: checksum %d cpu %.3f\n" (!acc land 0xffff) (Sys.time ())
