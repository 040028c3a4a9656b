(* raisebt.ml — exceptions raised while a backtrace is being recorded
   (Printexc.record_backtrace true, or OCAMLRUNPARAM=b as in development),
   as a validator that uses them for control flow does. The runtime's
   caml_raise_exn then moves to the C stack and calls caml_stash_backtrace,
   whose work grows with the frames the exception leaves; its rows still
   described the OCaml stack: without frame pointers every sample there was
   [broken], with them a junk frame sat under caml_raise_exn.

   Two raises: from OCaml code (Raisebt.descend, at the bottom of a
   recursion) and from C (int_of_string failing inside caml_int_of_string:
   caml_failwith, caml_raise_exception, then the same caml_raise_exn code).

   Usage: raisebt.exe [SECONDS] [ocaml] (1.5; ocaml: the raises from OCaml
   alone: OCaml 5.1 keeps the OCaml stack pointer where the call to
   caml_stash_backtrace loses it, so from C the walk stops, [broken]).
   Prints the sum it computed. *)

exception Too_deep of int

(* A search that gives up at the bottom of its recursion. *)
let[@inline never] rec descend n acc =
  if n = 0 then raise (Too_deep acc) else 1 + descend (n - 1) (acc + n)

(* Parses a field that is often malformed, deep in a recursive reader. *)
let[@inline never] rec read_field n s =
  if n = 0 then int_of_string s else 1 + read_field (n - 1) s

let[@inline never] search_round () =
  let total = ref 0 in
  for i = 1 to 2_000 do
    match descend 40 i with
    | _ -> ()
    | exception Too_deep k -> total := !total + (k land 0xff)
  done;
  !total

let fields = [| "12"; "x7"; "oops"; "0x1f"; "--3"; "42z" |]

let[@inline never] parse_round () =
  let total = ref 0 in
  for i = 1 to 2_000 do
    match read_field 40 fields.(i mod Array.length fields) with
    | v -> total := !total + v
    | exception Failure _ -> incr total
  done;
  !total

let () =
  Printexc.record_backtrace true;
  let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.5 in
  let from_c = Array.length Sys.argv <= 2 || Sys.argv.(2) <> "ocaml" in
  let t0 = Sys.time () in
  let sink = ref 0 in
  while Sys.time () -. t0 < seconds do
    sink := !sink + search_round () + if from_c then parse_round () else 0
  done;
  Printf.printf "%d\n" !sink
