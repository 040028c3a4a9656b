(* cbraise.ml — exceptions that end a callback from C, and exceptions that
   control a search, both raised in code built without -g (ocamlopt's
   default: an inlined raise that moves rsp to the trap and jumps to the
   handler):

   visits  a C stub calls an OCaml function that raises one time in two
           (caml_callback_exn; caml_start_program's handler takes the
           exception back to C): 3% of the samples were [broken] without
           frame pointers, in caml_start_program's way back to C;
   search  a recursive search that raises Found to a handler two functions
           up: 0.4% [broken] without frame pointers, in the raise itself.

   Usage: cbraise.exe [SECONDS] (CPU seconds, 1.2; each phase half).
   Prints two sums. *)

external visit : (int -> int) -> int -> int = "cbraise_visit"

exception Bad
exception Found of int

let[@inline never] crunch n =
  let r = ref 0 in
  for i = 1 to n do
    r := !r + (i land 3)
  done;
  !r

let[@inline never] checked i =
  let a = crunch 8 in
  if i land 1 = 0 then raise Bad else a

let[@inline never] visits until =
  let acc = ref 0 and i = ref 0 in
  while Sys.time () < until do
    for _ = 1 to 10_000 do
      incr i;
      acc := !acc + visit checked !i
    done
  done;
  !acc

let[@inline never] rec search a i n =
  if i >= n then -1 else if a.(i) = 7 then raise (Found i) else search a (i + 1) n

let[@inline never] find a = try search a 0 (Array.length a) with Found i -> i

let[@inline never] searches until =
  let a = Array.init 4 (fun i -> i + 5) and acc = ref 0 in
  while Sys.time () < until do
    for _ = 1 to 100_000 do
      acc := !acc + find a
    done
  done;
  !acc

let () =
  let seconds = try float_of_string Sys.argv.(1) with _ -> 1.2 in
  let v = visits (seconds /. 2.) in
  let s = searches seconds in
  Printf.printf "%d %d\n" v s
