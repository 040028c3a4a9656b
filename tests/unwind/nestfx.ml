(* tests/unwind/nestfx.ml — effect handlers nested deeper than a walk's
   first look reaches (OCaml's own testsuite nests 100,000 in
   effects/evenodd.ml): a stack of effect-based layers, each owning a piece
   of state, handling its own effect and forwarding the others outwards, as
   stacked middlewares or nested schedulers do. The innermost code does
   OCaml work, hashes strings (caml_hash: a [@@noalloc] call on the C
   stack), allocates, and asks layers far out for their state.
   Usage: nestfx.exe [SCALE] [LAYERS] *)

open Effect
open Effect.Deep

type _ Effect.t += Get : int -> int Effect.t

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let layers = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 40
let rounds = max 1 (int_of_float (scale *. 600.))

let keys = Array.init 64 (fun i -> String.make (200 + i) (Char.chr (97 + i mod 26)))

let[@inline never] rec work n acc =
  if n = 0 then acc else work (n - 1) ((acc * 31 + n) land 0xffffff)

let[@inline never] hash_keys acc =
  let a = ref acc in
  Array.iter (fun k -> a := !a + Hashtbl.hash k) keys;
  !a

let[@inline never] body r () =
  let acc = ref r in
  for i = 1 to 40 do
    acc := work 2000 !acc;
    acc := hash_keys !acc;
    acc := !acc + perform (Get (i mod layers));
    acc := !acc + List.length (List.init 50 (fun j -> j + i))
  done;
  !acc

let rec layer i body =
  if i = layers then body ()
  else
    let state = i * 7 in
    try_with (fun () -> layer (i + 1) body) ()
      { effc = (fun (type a) (e : a Effect.t) ->
          match e with
          | Get j when j = i -> Some (fun (k : (a, _) continuation) -> continue k state)
          | _ -> None) }

let () =
  let acc = ref 0 in
  for r = 1 to rounds do
    acc := !acc + layer 0 (body r)
  done;
  Printf.printf "nestfx: %d\n" (!acc land 0xffff)
