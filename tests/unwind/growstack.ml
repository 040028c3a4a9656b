(* growstack: an Eio-style round-robin scheduler whose fibers do non-tail
   recursion over long lists and yield at the bottom of it. Every fresh
   fiber starts on a small stack, so the recursion grows it again and again:
   caml_call_realloc_stack, caml_try_realloc_stack copying the frames to a
   stack twice the size and freeing the old one (fiber.c). The main fiber
   grows its own stack the same way, once. *)
type _ Effect.t += Yield : unit Effect.t

let ready : (unit -> unit) Queue.t = Queue.create ()

let spawn f =
  Effect.Deep.match_with f ()
    {
      retc = (fun () -> ());
      exnc = raise;
      effc =
        (fun (type a) (e : a Effect.t) ->
          match e with
          | Yield ->
              Some
                (fun (k : (a, unit) Effect.Deep.continuation) ->
                  Queue.push (fun () -> Effect.Deep.continue k ()) ready)
          | _ -> None);
    }

let rec run () =
  match Queue.take_opt ready with
  | Some k ->
      k ();
      run ()
  | None -> ()

(* Not tail-recursive: one frame per element, as a fold over a list
   written the plain way, with two dozen values live across the call (a
   frame of ~30 words: the stacks outgrow what the walk would copy blindly
   long before their frames would fill a profile's folded text). *)
let rec weigh yield_at = function
  | [] -> 0
  | x :: rest ->
      if x = yield_at then Effect.perform Yield;
      let a = x land 7 and b = x lsr 3 and c = x * 31 and d = x lxor 0x55 in
      let e = a + b and f = c - d and g = x mod 13 and h = x / 5 in
      let i = a * b and j = c lor d and k = e lxor f and m = g + h in
      let n = i - j and o = k * 3 and p = m lsr 1 and q = a + h in
      let r = b * g and t = c - e and u = d lor f and v = i lxor k in
      let w = j + m and y = n land o and z = p * q and zz = r - t in
      let s = weigh yield_at rest in
      s
      + ((a + b + c + d + e + f + g + h + i + j + k + m + n + o + p + q + r + t
        + u + v + w + y + z + zz)
        land 15)

let rec build n acc = if n = 0 then acc else build (n - 1) (n :: acc)

let total = ref 0

let () =
  let rounds = try int_of_string Sys.argv.(1) with _ -> 200 in
  let len = try int_of_string Sys.argv.(2) with _ -> 12000 in
  let l = build len [] in
  (* The main fiber's recursion, before any other fiber. *)
  total := weigh (-1) l;
  for r = 1 to rounds do
    for i = 1 to 8 do
      spawn (fun () -> total := !total + weigh (len - (r + i) mod 16) l)
    done;
    run ()
  done;
  Printf.printf "%d\n" !total
