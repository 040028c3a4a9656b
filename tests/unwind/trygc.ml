(* trygc.ml — OCaml work that enters the runtime from inside `try` bodies,
   as real code does (a parser's `try ... with Exit`, a lookup's
   `with Not_found`, Stdlib's int_of_string_opt): OCaml emits the calls of
   caml_call_gc (an allocation that finds the minor heap full) and of
   caml_ml_array_bound_error after the function's body, and its CFI there
   describes the frame outside any `try`, 16 bytes short a level. The walk
   read a word of the frame as the caller's return address: a junk or
   doubled frame, or [broken].

   Usage: trygc.exe [SECONDS] (1.5). Prints, per phase, the share of the
   program's CPU it took (its own clock), so the test checks the profile
   against the program. *)

let now = Sys.time

(* Allocates inside two nested handlers and keeps what it allocated alive
   across the minor collections it causes (each one promotes it). *)
let[@inline never] fill n =
  try
    try
      let acc = ref [] in
      for i = 1 to n do
        acc := (i, i + 1) :: !acc
      done;
      !acc
    with Not_found -> []
  with Exit -> []

let table = Array.make 8 0

(* Reads out of bounds half the time: the raise goes through
   caml_ml_array_bound_error, caml_c_call and caml_raise_exception. *)
let[@inline never] probe i = try table.(i) with Invalid_argument _ -> -1

(* Stdlib's int_of_string_opt allocates its Some inside its own `try`. *)
let[@inline never] parse strs =
  List.fold_left
    (fun acc s -> match int_of_string_opt s with Some v -> v :: acc | None -> acc)
    [] strs

let[@inline never] fill_round () = List.length (fill 200_000)

let[@inline never] probe_round () =
  let s = ref 0 in
  for i = 0 to 20_000 do
    s := !s + probe (i land 15)
  done;
  !s

let strs = List.init 5_000 (fun i -> if i mod 7 = 0 then "x" ^ string_of_int i else string_of_int i)

let[@inline never] parse_round () = List.length (parse strs)

let () =
  let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.5 in
  let spent = Array.make 3 0.0 in
  let t0 = now () in
  let sink = ref 0 in
  while now () -. t0 < seconds do
    List.iteri
      (fun k f ->
        let a = now () in
        sink := !sink + f ();
        spent.(k) <- spent.(k) +. (now () -. a))
      [ fill_round; probe_round; parse_round ]
  done;
  let total = now () -. t0 in
  List.iteri
    (fun k name -> Printf.printf "%s %.1f\n" name (100. *. spent.(k) /. total))
    [ "fill"; "probe"; "parse" ];
  if !sink = 42 then print_endline "unlikely"
